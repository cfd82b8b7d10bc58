"""Seconds of a traced part of a step on a GPU of a hardware profile, at a micro-batch: each
matrix product at the rate the profile gives its shape (the calibration's measured rate, or
the roofline figure), each flash attention at the calibration's rate for its sequence length,
and the memory-bound operators' bytes at the profile's bandwidth plus a launch per kernel
(eager: one per operator; fused, as under torch.compile: what `traced._fused` leaves)."""

from __future__ import annotations

from dataclasses import dataclass

from .traced import TRACE_MB, Costs

PHASES = ("forward", "backward", "recompute")


@dataclass(frozen=True)
class PartTime:
    """Seconds by phase, and the kinds of work inside them."""
    forward: float
    backward: float
    recompute: float
    matmul: float
    attention: float
    memory: float
    flops: dict  # phase -> FLOPs at this micro-batch

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute


def part_time(costs: Costs, profile, microbatch: int, fused: bool, cp: int = 1,
              efficiency: float | None = None) -> PartTime:
    """`cp`: context-parallel degree; the traced sequence is this GPU's share, and its queries
    meet every key of the sequence as the ring passes them round (cp chunks of attention).
    `efficiency`: the share of its kernels' speed alone a GPU keeps in the step (default: the
    profile's in-step figure, one GPU's; `step_efficiency` gives a job's)."""
    scale = microbatch / TRACE_MB
    slower = 1.0 / (profile.in_step if efficiency is None else efficiency)  # kernels in a step run slower than alone
    by_phase = {p: 0.0 for p in PHASES}
    kinds = {"matmul": 0.0, "attention": 0.0, "memory": 0.0}
    for phase, m, n, k, batch, dtype, tm, tn, tk, tb in costs.matmuls:
        seconds = slower * profile.matmul_seconds(_scaled(m, tm, scale), _scaled(n, tn, scale),
                                                  _scaled(k, tk, scale), dtype or "bf16", _scaled(batch, tb, scale))
        by_phase[phase] += seconds
        kinds["matmul"] += seconds
    for phase, flops, _batch, seq_q, seq_k, causal, backward in costs.attention:
        seconds = slower * profile.attention_seconds(flops * scale, seq_q, seq_k, causal, backward) * cp
        by_phase[phase] += seconds
        kinds["attention"] += seconds
    for (phase, how), (token_bytes, other_bytes, kernels) in costs.memory.items():
        if how != ("fused" if fused else "eager"):
            continue
        seconds = slower * profile.memory_seconds(max(0.0, token_bytes * scale + other_bytes), max(0, int(kernels)))
        by_phase[phase] += seconds
        kinds["memory"] += seconds
    flops = {p: costs.flops.get(p, 0) * scale for p in PHASES}
    if cp > 1:  # the ring's other chunks: attention's FLOPs × cp
        for a in costs.attention:
            flops[a[0]] += a[1] * scale * (cp - 1)
    return PartTime(by_phase["forward"], by_phase["backward"], by_phase["recompute"], kinds["matmul"],
                    kinds["attention"], kinds["memory"], flops)


def step_efficiency(profile, gpus: int) -> float:
    """The share of its kernels' speed alone a GPU keeps in a training step: one GPU's, measured
    by the calibration's whole layers (`in_step`); in a synchronous job of many, the profile's
    `multi_gpu` figure, which counts everything between kernels alone and a GPU in such a job
    (so it is not applied on top of `in_step`, only never above it)."""
    return profile.in_step if gpus <= 1 else min(profile.in_step, profile.multi_gpu)


def _scaled(size: int, is_tokens: bool, scale: float) -> int:
    return max(1, int(round(size * scale))) if is_tokens else size


def activation_bytes(costs: Costs, microbatch: int) -> float:
    """What the part keeps for backward at the end of forward, at this micro-batch."""
    return costs.saved[0] * microbatch / TRACE_MB + costs.saved[1]


def largest_bytes(costs: Costs, microbatch: int) -> float:
    """The largest single tensor of the traced step, at this micro-batch."""
    return max(costs.largest[0] * microbatch / TRACE_MB, costs.largest[1])


def peak_bytes(costs: Costs, microbatch: int) -> float:
    """The highest live memory during a traced step, at this micro-batch."""
    scale = microbatch / TRACE_MB
    return max((tokens * scale + other for tokens, other in costs.peak), default=0.0)
