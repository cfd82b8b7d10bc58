"""The memory a process of a configuration will use at its peak during training, in parts:
what it holds before any model (measured by the probe: the interpreter, torch, the process
group, the data), its share of the parameters, gradients and optimizer state, the
activations its forward keeps for backward (fewer under activation checkpointing, those of
the micro-batches in flight in a pipeline stage), the transient tensors of its kind of data
parallelism (a gradient before it lands in DDP's bucket; FSDP's gathered blocks), and the
allocator's slack: what the probe's own training job held beyond the same accounting of it.

On a CPU the figures are resident memory, which is what a per-process limit counts and what
`peak_memory_bytes` measures; on CUDA, the allocator's allocated bytes.
"""

from __future__ import annotations

from typing import Optional

from ..parallel.config import DDP, FSDP, ParallelConfig
from ..parallel.dims import ParallelDims
from .probe import Probe

#: A checkpointed block's backward: its activations computed again, and their gradients
#: alongside, in units of the block's saved activations — where the probe did not measure
#: the model's own (Footprint.recompute_height: the GPT 0.9, a Llama 1.7).
RECOMPUTE_HEIGHT = 1.2

#: FSDP's backward of its largest block holds that block gathered, its gradient whole and the
#: shard the reduce-scatter returns (the next block's prefetch lands after they are freed):
#: measured with `--steady-memory`, 2.5 blocks above the states on the 134 MB MLP's 67 MB block.
FSDP_GATHERED_BLOCKS = 2.5


def activation_bytes(probe: Probe, config: ParallelConfig, units: list[int], share: float, samples: float,
                     microbatch: Optional[float] = None) -> float:
    """What forward keeps for backward of `samples` samples in these units (a stage), under
    the configuration's activation checkpointing, plus (checkpointing) the one block of one
    micro-batch (`microbatch` samples; default `samples`) whose activations backward computes
    again at a time."""
    fp = probe.footprint
    per_unit = fp.block_activation_bytes_per_sample or ()
    whole = fp.activation_bytes_per_sample
    mine = sum(per_unit[i] for i in units) if len(per_unit) == len(fp.block_param_bytes) else whole
    mode = config.option("activation_checkpointing", "none")
    kept = fp.checkpointed_activation_bytes_per_sample.get(mode) if mode != "none" else None
    if kept is None:
        return mine * samples * share
    every = config.option("ac_every")
    if every:  # every k-th block whole-checkpointed: that share of the blocks' savings
        kept = whole - (whole - fp.checkpointed_activation_bytes_per_sample.get("full", whole)) / every
    fraction = mine / whole if whole else 1.0
    # Backward computes one block's activations again (for one micro-batch) and, going through
    # it, their gradients: the height of that, in units of the block's saved activations, is the
    # model's own, measured by the probe (measure/footprint.py's recompute_height).
    height = fp.recompute_height or RECOMPUTE_HEIGHT
    recomputed = height * max((per_unit[i] for i in units), default=0.0) if per_unit else 0.0
    return (kept * fraction * samples + recomputed * (samples if microbatch is None else microbatch)) * share


def in_use(probe: Probe, config: ParallelConfig, units: list[int], stage_fraction: float, tp_share: float,
           largest_unit: float, stage: int = 0) -> dict[str, float]:
    """The parts of a process's peak, in bytes (before the allocator's slack); `stage`: which
    pipeline stage these units are (its place decides the micro-batches it keeps)."""
    fp = probe.footprint
    dims = config.dims
    held = stage_fraction * tp_share
    shards = dims.shards if config.data_parallel == FSDP else 1
    batch = probe.batch_size
    if config.pipelined:
        m = config.microbatches
        # GPipe keeps every micro-batch's activations until backward; 1F1B keeps at most as many
        # as there are stages from this one to the last (the last stage goes straight to backward).
        in_flight = m if config.option("schedule") == "gpipe" else min(dims.pp - stage, m)
        samples, microbatch = batch / m * in_flight, batch / m
    else:
        samples = microbatch = batch
    # Tensor parallel splits the activations inside attention and the MLP (heads, hidden units);
    # the residual stream and the norms' stay whole in every process: about half of them.
    activation_share = (1 + tp_share) / 2
    parts = {"constant": probe.memory_constant_bytes,
             "parameters": fp.param_bytes * held / shards,
             "gradients": fp.grad_bytes * held / shards,
             "optimizer_state": fp.optimizer_bytes * held / shards,
             "activations": activation_bytes(probe, config, units, activation_share, samples, microbatch)}
    largest_tensor = fp.largest_tensor_bytes * tp_share if len(units) == len(fp.block_param_bytes) else \
        min(fp.largest_tensor_bytes, largest_unit) * tp_share
    parts["transient"] = transient_bytes(probe, config, held, largest_unit, largest_tensor)
    return parts


def transient_bytes(probe: Probe, config: ParallelConfig, held: float, largest_unit: float,
                    largest_tensor: float) -> float:
    """DDP: a gradient computed before it is copied into its bucket (Gloo's ring works in the
    bucket and a few small buffers: a DDP process of two peaked 4 MB above one of one on the
    134 MB MLP). A pipeline: a micro-batch's gradient before it is added to those of the
    micro-batches before it. FSDP: a block gathered whole, its gradient whole and its shard
    from the reduce-scatter; with reshard_after_forward false (or N) the blocks also stay
    gathered (N ways) from forward to backward."""
    fp = probe.footprint
    if config.data_parallel == DDP:
        return float(largest_tensor)
    if config.data_parallel != FSDP:
        return float(largest_tensor) if config.pipelined and config.microbatches > 1 else 0.0
    shards = config.dims.shards
    gathered = FSDP_GATHERED_BLOCKS * largest_unit
    if config.pipelined and config.microbatches > 1:
        gathered += largest_tensor / shards
    reshard = config.option("reshard_after_forward", True)
    if reshard is False:
        gathered += fp.param_bytes * held * (1 - 1 / shards)
    elif isinstance(reshard, int) and not isinstance(reshard, bool) and reshard > 1:
        gathered += fp.param_bytes * held * (1 / reshard - 1 / shards)
    return gathered


#: What the probe's own training job ran: one DDP process with the whole model.
_PROBES_OWN = ParallelConfig("ddp", None, ParallelDims(), DDP)


def slack(probe: Probe) -> float:
    """The allocator's share: what the probe's training job (one DDP process, the whole model)
    held at its peak beyond the accounting of `in_use` — memory freed during a step but kept by
    the allocator, the gradients of activations on their way through backward. Zero where the
    probe did not measure its peak."""
    if not probe.memory_peak_bytes:
        return 0.0
    fp = probe.footprint
    units = list(range(len(fp.block_param_bytes)))
    parts = in_use(probe, _PROBES_OWN, units, 1.0, 1.0, max(fp.block_param_bytes, default=0))
    return max(0.0, probe.memory_peak_bytes - sum(parts.values()))


def peak_bytes(probe: Probe, config: ParallelConfig, units: Optional[list[int]] = None, stage_fraction: float = 1.0,
               tp_share: float = 1.0, largest_unit: Optional[float] = None, stage: int = 0) -> float:
    fp = probe.footprint
    units = list(range(len(fp.block_param_bytes))) if units is None else units
    largest = max((fp.block_param_bytes[i] for i in units), default=0) * tp_share if largest_unit is None else largest_unit
    return sum(in_use(probe, config, units, stage_fraction, tp_share, largest, stage).values()) + slack(probe)
