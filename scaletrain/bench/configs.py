"""Which configurations a bench measures: the threads-only loop, then each strategy at each
world size — always including one process, the reference every speedup is measured against —
and, for accuracy runs on several processes, each learning-rate rule."""

from __future__ import annotations

from ..plan.configuration import configuration, options_for
from ..strategies import REGISTRY, baseline_strategy
from .spec import RunSpec

BASELINE_LABEL = "threads-only ×1"


def bench_configs(strategies: list[str], world_sizes: list[int], lr_rules: list[str], cores: int | None,
                  accuracy: bool, options: dict | None = None) -> tuple[list[RunSpec], list[str]]:
    """(configurations, notes on what was left out). The threads-only loop comes first: one
    process of the `single` strategy with every core (`cores` threads; None on GPUs). Each
    strategy runs on one process too, whether or not `world_sizes` names 1: its one-process run,
    through the same code path as its distributed ones, is what their speedup is against."""
    configs = [RunSpec(baseline_strategy(), 1, threads=cores, label=BASELINE_LABEL, baseline=True)]
    notes = []
    for name in strategies:
        given = options_for(name, options or {})
        for n in sorted({1, *world_sizes}):
            if not REGISTRY[name].multi_process and n > 1:
                notes.append(f"{name} on {n} processes left out: {name} runs one process")
                continue
            if REGISTRY[name].baseline and n == 1:
                continue  # the same run as the baseline
            shape = configuration(name, n, given)
            if shape is None:
                notes.append(f"{name} on {n} process(es) left out: its degrees ({', '.join(f'{k} {v}' for k, v in given.items())}) "
                             "do not fit that many")
                continue
            rules = lr_rules if accuracy and n > 1 else ["none"]
            for rule in rules:
                suffix = f", lr {rule}" if accuracy and n > 1 else ""
                configs.append(RunSpec(name, n, None, rule, f"{shape.label}{suffix}", options=given))
    return configs, notes
