"""The comparison table of `scaletrain report`: one row per run."""

from __future__ import annotations

from typing import Optional

from .runs import RunRecord, describe_world

COLUMNS = ("run", "strategy", "world size", "held-out accuracy", "held-out loss", "samples/s", "TFLOP/s", "MFU",
           "wall time (s)", "epochs")


def rows(runs: list[RunRecord]) -> list[list[str]]:
    table = []
    for run in runs:
        final = run.final
        table.append([run.folder.absolute().name, run.facts.get("strategy", "?"), describe_world(run) or "?",
                      _number(final["accuracy"], ".4f"), _number(final["loss"], ".4f"),
                      _number(final["samples_per_second"], ",.0f"), _number(run.summary.get("tflops_per_second"), ".3g"),
                      _number(run.summary.get("mfu"), ".1%"), _number(final["wall_seconds"], ".1f"),
                      _number(final["epochs"], "d")])
    return table


def markdown(runs: list[RunRecord]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(runs)]
    experts = expert_lines(runs)
    if experts:
        lines += ["", "Tokens each expert received per step (a mixture of experts' load balance):", ""]
        lines += [f"- {line}" for line in experts]
    return "\n".join(lines) + "\n"


def expert_lines(runs: list[RunRecord]) -> list[str]:
    """For each run of a mixture of experts: its layers' tokens per expert per step, and the
    worst layer's largest expert over the mean (1.00: balanced)."""
    lines = []
    for run in runs:
        layers = run.summary.get("expert_tokens_per_step")
        if not layers:
            continue
        shown = "; ".join(f"layer {i}: " + "/".join(f"{v:g}" for v in layer) for i, layer in enumerate(layers))
        ratio = run.summary.get("expert_load_max_over_mean")
        lines.append(f"{run.label}: {shown}" + (f" (max/mean {ratio:.2f})" if ratio is not None else ""))
    return lines


def _number(value: Optional[float], spec: str) -> str:
    if value is None:
        return "-"
    if spec.endswith("d") and isinstance(value, float) and value.is_integer():
        value = int(value)  # an epoch written as 1.0 (by hand, or by another program)
    return format(value, spec)
