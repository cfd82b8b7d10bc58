"""The memory a process of a configuration will use at its peak during training, in parts
(`MemoryParts`): what it holds before any model (measured by the probe: the interpreter,
torch, the process group, the data), its share of the parameters, gradients and optimizer
state (FSDP's shards: `state_divisor`), the activations its forward keeps for backward (fewer
under activation checkpointing: `kept_activation_bytes`; a tensor-parallel process's share of
them: `activation_share`; a pipeline stage's micro-batches in flight: `in_flight`), the
transient tensors of its parallelisms (`transient_bytes`), and the allocator's slack: what the
probe's own training job held beyond the same accounting of it. The parallelisms' cost modules
contribute each part they change.

On a CPU the figures are resident memory, which is what a per-process limit counts and what
`peak_memory_bytes` measures; on CUDA, the allocator's allocated bytes.
"""

from __future__ import annotations

from typing import Optional

from ...parallel.config import DDP, FSDP, ParallelConfig
from ...parallel.dims import ParallelDims
from ..probe import Probe
from .registry import enabled, first, token_share
from .terms import MemoryParts, Step

#: What the probe's own training job ran: one DDP process with the whole model.
_PROBES_OWN = ParallelConfig("ddp", None, ParallelDims(), DDP)


def plain_activation_bytes(probe: Probe, units: list[int], share: float, samples: float) -> float:
    """What forward keeps for backward of `samples` samples in these units, as measured."""
    fp = probe.footprint
    per_unit = fp.block_activation_bytes_per_sample or ()
    mine = sum(per_unit[i] for i in units) if len(per_unit) == len(fp.block_param_bytes) else \
        fp.activation_bytes_per_sample
    return mine * samples * share


def in_use(probe: Probe, config: ParallelConfig, units: list[int], stage_fraction: float, tp_share: float,
           largest_unit: float, stage: int = 0) -> MemoryParts:
    """The parts of a process's peak, in bytes (before the allocator's slack); `stage`: which
    pipeline stage these units are (its place decides the micro-batches it keeps)."""
    fp = probe.footprint
    costs = enabled(config)
    held = stage_fraction * tp_share
    shards = 1
    for c in costs:
        if c.state_divisor is not None:
            shards *= c.state_divisor(config)
    batch = probe.batch_size
    flight = first(costs, "in_flight")
    samples, microbatch = flight(config, stage, batch) if flight is not None else (batch, batch)
    # Of each sample, the tokens this process keeps (context parallel's 1/cp), and what they keep.
    tokens = token_share(costs, config)
    samples, microbatch = samples * tokens, microbatch * tokens
    share_of = first(costs, "activation_share")
    activation_share = share_of(tp_share) if share_of is not None else 1.0
    kept = first(costs, "kept_activation_bytes")
    activations = kept(probe, config, units, activation_share, samples, microbatch) if kept is not None else None
    largest_tensor = fp.largest_tensor_bytes * tp_share if len(units) == len(fp.block_param_bytes) else \
        min(fp.largest_tensor_bytes, largest_unit) * tp_share
    transient = 0.0
    for c in costs:
        if c.transient_bytes is not None:
            transient += c.transient_bytes(probe, config, held, largest_unit, largest_tensor, shards)
    return MemoryParts(
        constant=probe.memory_constant_bytes, parameters=fp.param_bytes * held / shards,
        gradients=fp.grad_bytes * held / shards, optimizer_state=fp.optimizer_bytes * held / shards,
        activations=plain_activation_bytes(probe, units, activation_share, samples) if activations is None
        else activations, transient=transient)


def slack(probe: Probe, config: Optional[ParallelConfig] = None) -> float:
    """The allocator's share: what the probe's training job (one DDP process, the whole model)
    held at its peak beyond the accounting of `in_use` — memory freed during a step but kept by
    the allocator, the gradients of activations on their way through backward. Zero where the
    probe did not measure its peak.

    An FSDP configuration takes it from the probe's FSDP steps instead, where measured: FSDP
    gathers and frees every block twice a step, and what an allocator keeps of that churn is
    not what it keeps of a DDP step's (under tcmalloc, the 134 MB MLP's FSDP process of two was
    predicted 12% low from the DDP job's slack, within 4% from its own)."""
    fp = probe.footprint
    units = list(range(len(fp.block_param_bytes)))
    largest = max(fp.block_param_bytes, default=0)
    if config is not None and config.data_parallel == FSDP and probe.fsdp_peak_above_bytes:
        measured = _probes_fsdp(probe.fsdp_peak_world_size)
        parts = in_use(probe, measured, units, 1.0, 1.0, largest)
        return max(0.0, probe.memory_constant_bytes + probe.fsdp_peak_above_bytes - parts.total)
    if not probe.memory_peak_bytes:
        return 0.0
    parts = in_use(probe, _PROBES_OWN, units, 1.0, 1.0, largest)
    return max(0.0, probe.memory_peak_bytes - parts.total) * _churn_share(probe, config)


def _churn_share(probe: Probe, config: Optional[ParallelConfig]) -> float:
    """What of the probe's slack a process of `config` keeps. What an allocator keeps of a step
    is what it freed and may hand out again: half of it taken as following a forward and
    backward's tensors, which a pipeline's process makes one micro-batch at a time (their share
    of the probe's batch), half as the rest of the step's, whole. Measured under mimalloc on
    pipeline × 2 (2 micro-batches): with the whole slack the MLP, the GPT and the Llama were
    predicted 8%, 11–13% and 11–15% high; with the micro-batch's share alone 3%, 6% and
    10% low; the halves are between (docs/memory.md)."""
    flight = first(enabled(config), "in_flight") if config is not None else None
    if flight is None or not probe.batch_size:
        return 1.0
    _samples, microbatch = flight(config, 0, probe.batch_size)
    return (1.0 + min(1.0, microbatch / probe.batch_size)) / 2


def _probes_fsdp(world_size: int) -> ParallelConfig:
    """What the probe's FSDP steps ran: every block and the root sharded across the whole job."""
    return ParallelConfig("fsdp", None, ParallelDims(dp_shard=max(1, world_size)), FSDP)


def peak_bytes(probe: Probe, config: ParallelConfig, units: Optional[list[int]] = None, stage_fraction: float = 1.0,
               tp_share: float = 1.0, largest_unit: Optional[float] = None, stage: int = 0) -> float:
    fp = probe.footprint
    units = list(range(len(fp.block_param_bytes))) if units is None else units
    largest = max((fp.block_param_bytes[i] for i in units), default=0) * tp_share if largest_unit is None else largest_unit
    return in_use(probe, config, units, stage_fraction, tp_share, largest, stage).total + slack(probe, config)


def stage_peak(step: Step) -> float:
    """The largest of the processes' peaks: each stage's share, its units, its place in the pipeline."""
    fp = step.probe.footprint
    peaks = []
    for index, group in enumerate(step.groups):
        fraction = sum(fp.block_param_bytes[i] for i in group) / max(1, fp.param_bytes)
        share = step.held_share(group)
        largest = max(fp.block_param_bytes[i] for i in group) * share
        peaks.append(peak_bytes(step.probe, step.config, group, fraction, share, largest, index))
    return max(peaks)
