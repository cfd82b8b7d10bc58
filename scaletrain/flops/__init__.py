"""FLOPs of a training step from torch's own counter (`torch.utils.flop_counter`): the model's
(forward and backward) apart from activation checkpointing's recomputation (hardware FLOPs),
shared by the runs' MFU (`count_step`, on the real model and batch) and the cluster planner
(`TraceMode(detail=True)` under fake tensors).

The counter is imported on first use, not with the package: a parallelism that tells the
counter of its whole work (`whole_work`) is on every run's path to its first step, the counter
is not."""

from __future__ import annotations

_TRACE_NAMES = ("CUSTOM_FLOPS", "Op", "StepTrace", "TraceMode", "op_flops")

__all__ = list(_TRACE_NAMES)


def __getattr__(name: str):
    if name in _TRACE_NAMES:
        from . import trace

        return getattr(trace, name)
    raise AttributeError(f"module 'scaletrain.flops' has no attribute {name!r}")
