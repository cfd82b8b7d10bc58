"""From the rounds' results to the bench's rows: every figure as a median with its 95%
interval, speedups as paired per-round ratios against one process measured the same way,
and the plan's prediction for each configuration beside what was measured.

The reference for speedup and efficiency is the fastest one-process configuration run
through the same code path as the distributed ones (e.g. `ddp ×1`: the DDP wrapper, the
same worker, the same optimizer and loader). The threads-only loop (the `single` strategy
with every core) is reported beside it, but the verdict does not use it.
"""

from __future__ import annotations

from typing import Optional

from ..measure.spread import Spread, paired_ratios, plain_spread, ratio_spread
from .spec import RunSpec

#: Figures that are rates or whole step times (interval on a log scale), and parts of a step
#: that may be zero (plain interval).
_RATIO_FIGURES = ("samples_per_s", "step_s", "compute_s", "data_s", "optimizer_s", "peak_memory_bytes")
_PLAIN_FIGURES = ("exposed_comm_s", "idle_s", "eval_accuracy", "eval_loss")
_FACTS = ("threads_per_process", "global_batch_size", "lr_factor", "lr", "lr_warmup_steps", "backend", "device",
          "pinned_cores", "mesh", "parallel_dims", "microbatches", "schedule")


def reference_key(configs: list[RunSpec], results: dict[str, list[dict]]) -> Optional[str]:
    """The one-process configuration with the highest median samples/s among those run
    through a strategy's own code path; the threads-only loop only when it is the only one."""
    def median_rate(spec: RunSpec) -> float:
        return ratio_spread([r["samples_per_s"] for r in results[spec.key]]).median

    ones = [s for s in configs if s.world_size == 1 and not s.baseline and results[s.key]]
    ones = ones or [s for s in configs if s.world_size == 1 and results[s.key]]
    return max(ones, key=median_rate).key if ones else None


def _figures(runs: list[dict]) -> dict[str, Spread]:
    row = {}
    for key in _RATIO_FIGURES + _PLAIN_FIGURES:
        values = [r.get(key) for r in runs]
        if key == "peak_memory_bytes":  # the largest process's, each round
            values = [max(v) if v else None for v in values]
        spread = (ratio_spread if key in _RATIO_FIGURES else plain_spread)(values)
        if spread is not None:
            row[key] = spread
    return row


def _predicted(row: dict, spec: RunSpec, predictions: dict[str, list], reference: str, measured: list[float]) -> None:
    """The plan's figures for this row, per round, and how far they are from the measurement."""
    mine, theirs = predictions.get(spec.key) or [], predictions.get(reference) or []
    if not mine or any(p is None for p in mine):
        return
    row["predicted_samples_per_s"] = ratio_spread([p.samples_per_s for p in mine])
    for name in ("step_s", "compute_s", "exposed_comm_s"):
        row[f"predicted_{name}"] = plain_spread([getattr(p, name) for p in mine])
    if theirs and all(p is not None for p in theirs):
        predicted = paired_ratios([p.samples_per_s for p in mine], [p.samples_per_s for p in theirs])
        row["predicted_speedup"] = ratio_spread(predicted)
        # How far each round's prediction was from that round's measurement.
        row["prediction_error"] = row["predicted_speedup"].median / row["speedup"].median - 1
        row["prediction_ratio"] = ratio_spread(paired_ratios(predicted, measured))


def combine(configs: list[RunSpec], results: dict[str, list[dict]],
            predictions: Optional[dict[str, list]] = None) -> tuple[list[dict], Optional[str]]:
    """(one row per configuration, the key of the reference configuration)."""
    reference = reference_key(configs, results)
    threads_only = next((s.key for s in configs if s.baseline), None)
    rows = []
    for spec in configs:
        runs = results[spec.key]
        if not runs:
            continue
        row = {"label": spec.key, "strategy": spec.strategy, "world_size": spec.world_size, "baseline": spec.baseline,
               "reference": spec.key == reference, "lr_scaling": spec.lr_scaling, "rounds": len(runs),
               "options": spec.options,
               **{k: runs[0].get(k) for k in _FACTS}, **_figures(runs)}
        rates = [r["samples_per_s"] for r in runs]
        if reference is not None:
            ratios = paired_ratios(rates, [r["samples_per_s"] for r in results[reference]])
            row["speedup"] = ratio_spread(ratios)
            row["efficiency"] = row["speedup"].scaled(1 / spec.world_size)
            if predictions:
                _predicted(row, spec, predictions, reference, ratios)
        if threads_only is not None:
            row["speedup_vs_threads_only"] = ratio_spread(
                paired_ratios(rates, [r["samples_per_s"] for r in results[threads_only]]))
        rows.append(row)
    return rows, reference


def jsonable(value):
    """Rows with their Spreads as plain dicts, for bench.json."""
    if isinstance(value, Spread):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value

