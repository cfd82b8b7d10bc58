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
    return "\n".join(lines) + "\n"


def _number(value: Optional[float], spec: str) -> str:
    if value is None:
        return "-"
    if spec.endswith("d") and isinstance(value, float) and value.is_integer():
        value = int(value)  # an epoch written as 1.0 (by hand, or by another program)
    return format(value, spec)
