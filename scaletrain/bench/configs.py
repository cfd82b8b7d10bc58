"""Which configurations a bench measures: the threads-only baseline, then each strategy at
each world size (and, for accuracy runs on several processes, each learning-rate rule)."""

from __future__ import annotations

from ..strategies import REGISTRY
from .spec import RunSpec

BASELINE_LABEL = "threads-only ×1"


def bench_configs(strategies: list[str], nprocs: list[int], lr_rules: list[str], cores: int | None,
                  accuracy: bool) -> tuple[list[RunSpec], list[str]]:
    """(configurations, notes on what was left out). The baseline comes first: one process
    with every core (`cores` threads; None on GPUs), what a user gets without distributing."""
    configs = [RunSpec("single", 1, threads=cores, label=BASELINE_LABEL, baseline=True)]
    notes = []
    for name in strategies:
        for n in nprocs:
            if not REGISTRY[name].multi_process and n > 1:
                notes.append(f"{name} on {n} processes left out: {name} runs one process")
                continue
            if name == "single" and n == 1:
                continue  # the same run as the baseline
            rules = lr_rules if accuracy and n > 1 else ["none"]
            for rule in rules:
                suffix = f", lr {rule}" if accuracy and n > 1 else ""
                configs.append(RunSpec(name, n, None, rule, f"{name} ×{n}{suffix}"))
    return configs, notes
