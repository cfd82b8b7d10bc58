"""FLOPs of a training step from torch's own counter (`torch.utils.flop_counter`): the model's
(forward and backward) apart from activation checkpointing's recomputation (hardware FLOPs),
shared by the runs' MFU (`count_step`, on the real model and batch) and the cluster planner
(`TraceMode(detail=True)` under fake tensors)."""

from .trace import CUSTOM_FLOPS, Op, StepTrace, TraceMode, op_flops

__all__ = ["CUSTOM_FLOPS", "Op", "StepTrace", "TraceMode", "op_flops"]
