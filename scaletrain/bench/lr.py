"""Learning-rate scaling with the effective batch, and the warm-up that makes it safe.

With n data-parallel processes the effective batch is n × the per-process batch. The linear
rule multiplies the learning rate by n, the square-root rule by √n; both start at the
one-process rate and ramp up linearly over the warm-up steps (a large rate at the very
start, with random weights, diverges).
"""

from __future__ import annotations

import math

from ..foundation.errors import UsageError

RULES = ("none", "linear", "sqrt")


def lr_factor(rule: str, data_parallel_size: int) -> float:
    if rule == "none":
        return 1.0
    if rule == "linear":
        return float(data_parallel_size)
    if rule == "sqrt":
        return math.sqrt(data_parallel_size)
    raise UsageError(f"unknown learning-rate rule {rule!r}; choose one of: {', '.join(RULES)} (--lr-scaling)")


def warmup_multiplier(step: int, factor: float, warmup_steps: int) -> float:
    """Multiplier of the scaled rate at `step`: 1/factor (the one-process rate) at step 0,
    rising linearly to 1 (the scaled rate) at `warmup_steps`."""
    if warmup_steps <= 0 or factor == 1.0:
        return 1.0
    progress = min(1.0, step / warmup_steps)
    return 1.0 / factor + (1.0 - 1.0 / factor) * progress
