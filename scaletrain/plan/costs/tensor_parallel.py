"""Tensor parallel's cost terms: each process holds (and computes) its share of every layer the
model's plan splits; two all-reduces per row-wise layer and micro-batch (the output in
forward, the input's gradient in backward) on the critical path; DTensor's own machinery,
measured (plan/overheads.py); and the activations inside attention and the MLP split too."""

from __future__ import annotations

from typing import Optional

from ...parallel.config import ParallelConfig
from ...parallel.dims import ParallelDims
from ...strategies.base import MeshOptions
from .. import formulas as f
from ..probe import Probe
from .registry import CostTerms, register
from .step import beyond_the_model
from .terms import Step, Terms


def runs(probe: Probe, config: ParallelConfig) -> bool:
    """A model without a tensor-parallel plan cannot run so."""
    return bool(probe.footprint.block_tp_param_bytes)


def held_share(probe: Probe, config: ParallelConfig, units: Optional[list[int]] = None) -> float:
    """The share of these units' parameters — and, roughly, of their arithmetic — a process
    holds under tensor parallel: what the plan splits, 1/tp of it, and the rest whole."""
    fp, tp = probe.footprint, config.dims.tp
    blocks = range(len(fp.block_param_bytes)) if units is None else units
    total = sum(fp.block_param_bytes[i] for i in blocks) or 1
    if tp == 1 or not fp.block_tp_param_bytes:
        return 1.0
    split = sum(fp.block_tp_param_bytes[i] for i in blocks)
    return (total - split + split / tp) / total


def activation_share(tp_share: float) -> float:
    """Tensor parallel splits the activations inside attention and the MLP (heads, hidden
    units); the residual stream and the norms' stay whole in every process: about half of them."""
    return (1 + tp_share) / 2


def all_reduce_seconds(step: Step) -> float:
    """Each row-wise layer's output all-reduced in forward, as many input gradients in
    backward, once per micro-batch."""
    probe, s, tp = step.probe, step.s, step.config.dims.tp
    group = s.group(tp)
    samples, times = probe.batch_size * step.token_share / step.microbatches, step.microbatches
    per_sample = [probe.footprint.block_tp_reduce_bytes_per_sample[i] for i in step.stage]
    return times * sum(2 * f.ring_all_reduce_seconds(b * samples, tp, group.busbw(b * samples), group.alpha_s)
                       for b in per_sample if b)


def terms(step: Step) -> Terms:
    """Its all-reduces, and its machinery for every layer of the stage, however many ways each
    is split, on cores shared as the arithmetic's are."""
    comm = all_reduce_seconds(step)
    machinery = machinery_seconds(step.probe) * step.stage_fraction * step.s.oversubscription if step.machinery else 0.0
    return Terms(compute_s=machinery, comm_s=comm, exposed_s=comm)


def _measured_step_config(world_size: int) -> ParallelConfig:
    """What the probe's tensor-parallel step ran: the model's plan over every process."""
    return ParallelConfig("tp", MeshOptions(), ParallelDims(tp=world_size))


def machinery_seconds(probe: Probe) -> float:
    """What tensor parallel's own machinery adds to a step of the whole model (plan/overheads.py):
    where the probe timed a real tensor-parallel step across its processes, what that step took
    beyond this model's prediction of it without this term — DTensor's dispatch and the ranks
    waiting for each other at every layer; otherwise the mesh-of-one step's extra time."""
    measured = probe.tp_step
    beyond = beyond_the_model(probe, measured, _measured_step_config(measured.world_size)) \
        if measured is not None else None
    return probe.tp_overhead_s if beyond is None else beyond


def candidates(world_size: int, batch_size: int, blocks: int, tensor_parallel: bool,
               sequence: int = 0) -> list[tuple[str, dict]]:
    """Where the model has a plan: every tensor-parallel degree, replicated (tp) and, below the
    whole world, sharded (FSDP × TP)."""
    if not tensor_parallel:
        return []
    found: list[tuple[str, dict]] = []
    for t in (d for d in range(2, world_size + 1) if world_size % d == 0):
        found.append(("tp", {"tp": t}))
        if t < world_size:
            found.append(("fsdp", {"tp": t}))
    return found


COSTS = register(CostTerms("tensor_parallel", runs=runs, held_share=held_share, activation_share=activation_share,
                          terms=terms, candidates=candidates))
