"""Running every configuration of a bench, each in fresh processes, and combining the results.

Each configuration is a job of its own (spawn), so that no configuration inherits another's
threads, memory or process group. With --repeat the configurations run round after round,
in alternating order, and every figure is the median over the rounds: load from elsewhere
on the machine then hits all configurations alike.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Callable

from ..launchers.facade import spawn
from ..measure.steps import PARTS
from .spec import BenchSettings, RunSpec, to_argv

RESULT_FILE = "result.json"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def measure_config(settings: BenchSettings, spec: RunSpec, folder: Path) -> dict:
    code = spawn([*to_argv(settings, spec), "--out", str(folder)], spec.nproc)
    if code != 0 or not (folder / RESULT_FILE).exists():
        raise RuntimeError(f"measuring {spec.key} failed (exit status {code}); its error is printed above")
    return json.loads((folder / RESULT_FILE).read_text())


def run_rounds(settings: BenchSettings, configs: list[RunSpec], repeat: int, out: Path,
               say: Callable[[str], None]) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {spec.key: [] for spec in configs}
    for round_index in range(repeat):
        order = configs if round_index % 2 == 0 else configs[::-1]
        for spec in order:
            folder = out / "runs" / f"{slug(spec.key)}-{round_index + 1}"
            result = measure_config(settings, spec, folder)
            results[spec.key].append(result)
            accuracy = f", held-out accuracy {result['eval_accuracy']:.3f}" if "eval_accuracy" in result else ""
            say(f"  {spec.key}: {result['samples_per_s']:,.0f} samples/s{accuracy}"
                f"{f' (round {round_index + 1}/{repeat})' if repeat > 1 else ''}")
    return results


def _median(rows: list[dict], key: str):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def combine(configs: list[RunSpec], results: dict[str, list[dict]]) -> list[dict]:
    """One row per configuration: medians over the rounds, speedup and efficiency against
    the baseline's samples per second."""
    rows = []
    for spec in configs:
        runs = results[spec.key]
        row = {"label": spec.key, "strategy": spec.strategy, "nproc": spec.nproc, "baseline": spec.baseline,
               "rounds": len(runs), "threads_per_process": runs[0]["threads_per_process"],
               "global_batch_size": runs[0]["global_batch_size"], "lr_scaling": spec.lr_scaling,
               "lr_factor": runs[0]["lr_factor"], "lr": runs[0]["lr"], "lr_warmup_steps": runs[0]["lr_warmup_steps"],
               "backend": runs[0]["backend"], "device": runs[0]["device"],
               "samples_per_s_rounds": [r["samples_per_s"] for r in runs]}
        for key in ("samples_per_s", "step_s", *PARTS, "eval_accuracy", "eval_loss"):
            value = _median(runs, key)
            if value is not None:
                row[key] = value
        rows.append(row)
    base_runs = results[next(spec.key for spec in configs if spec.baseline)]
    for spec, row in zip(configs, rows):
        # Ratios within a round (taken minutes apart at most), then the median over rounds.
        ratios = [r["samples_per_s"] / b["samples_per_s"] for r, b in zip(results[spec.key], base_runs)]
        row["speedup"] = statistics.median(ratios)
        row["speedup_rounds"] = ratios
        row["efficiency"] = row["speedup"] / row["nproc"]
    return rows
