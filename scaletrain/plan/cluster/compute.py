"""Seconds of a traced part of a step on a GPU of a hardware profile, at a micro-batch: each
matrix product at the rate the profile gives its shape (the calibration's measured rate, or
the roofline figure), each attention at its kernel's rate for its sequence length, head size
and causality (the calibration's, or the kernel's published one: `hardware/kernels.py`), and
the memory-bound operators' bytes at the profile's bandwidth plus a launch per kernel (eager:
one per operator; fused, as under torch.compile: what `traced._fused` leaves).

Under context parallel a GPU holds 1/cp of each sequence, cut in 2·cp chunks and balanced
(chunks i and 2cp − 1 − i): each layer it runs its own block causally and, for each of the
cp − 1 others, a block of half the square without a mask (all its queries against one chunk
of keys, or one chunk of its queries against all the keys) — a causal sequence's work, half
the whole score matrix, evenly shared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .traced import TRACE_MB, Costs

PHASES = ("forward", "backward", "recompute")


@dataclass(frozen=True)
class Execution:
    """How a part's kernels run: memory-bound operators fused, the attention kernel (see
    `HardwareProfile.attention_seconds`), the context-parallel degree, and the share of their
    speed alone the kernels keep in the step (None: the profile's in-step figure, one GPU's;
    `step_efficiency` gives a job's)."""
    fused: bool = False
    attention: str = "calibrated"
    cp: int = 1
    efficiency: Optional[float] = None


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


def part_time(costs: Costs, profile, microbatch: int, execution: Execution = Execution()) -> PartTime:
    scale = microbatch / TRACE_MB
    efficiency = profile.in_step if execution.efficiency is None else execution.efficiency
    slower = 1.0 / efficiency  # kernels in a step run slower than alone
    by_phase = {p: 0.0 for p in PHASES}
    kinds = {"matmul": 0.0, "attention": 0.0, "memory": 0.0}
    for phase, m, n, k, batch, dtype, tm, tn, tk, tb in costs.matmuls:
        seconds = slower * profile.matmul_seconds(_scaled(m, tm, scale), _scaled(n, tn, scale),
                                                  _scaled(k, tk, scale), dtype or "bf16", _scaled(batch, tb, scale))
        by_phase[phase] += seconds
        kinds["matmul"] += seconds
    for phase, flops, _batch, seq_q, seq_k, causal, backward, head_dim in costs.attention:
        seconds = slower * attention_seconds(profile, flops * scale, seq_q, seq_k, causal, backward, head_dim,
                                             execution)
        by_phase[phase] += seconds
        kinds["attention"] += seconds
    for (phase, how), (token_bytes, other_bytes, kernels) in costs.memory.items():
        if how != ("fused" if execution.fused else "eager"):
            continue
        seconds = slower * profile.memory_seconds(max(0.0, token_bytes * scale + other_bytes), max(0, int(kernels)))
        by_phase[phase] += seconds
        kinds["memory"] += seconds
    flops = {p: costs.flops.get(p, 0) * scale for p in PHASES}
    if execution.cp > 1:  # counted as the whole sequence's attention (torch's count without context parallel)
        for a in costs.attention:
            flops[a[0]] += a[1] * scale * (execution.cp - 1)
    return PartTime(by_phase["forward"], by_phase["backward"], by_phase["recompute"], kinds["matmul"],
                    kinds["attention"], kinds["memory"], flops)


def attention_seconds(profile, flops: float, seq_q: int, seq_k: int, causal: bool, backward: bool, head_dim: int,
                      execution: Execution) -> float:
    """One traced attention (this GPU's share of the sequence) and, under context parallel, the
    cp − 1 blocks of half its square the ring brings."""
    kernel, cp = execution.attention, execution.cp
    own = profile.attention_seconds(flops, seq_q, seq_k, causal, backward, head_dim, kernel)
    if cp == 1:
        return own
    half = profile.attention_seconds(flops / 2, seq_q, max(1, seq_k // 2), False, backward, head_dim, kernel)
    return own + (cp - 1) * half


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
