"""The data-parallel dimensions' cost terms: DDP's gradient buckets all-reduced over the
replicas, hidden behind the backward after them; or FSDP's all-gathers and reduce-scatters over
the shards (every dimension FSDP shards over) and, with replicas too (HSDP), the shards'
all-reduce over them, hidden behind forward and backward alike; FSDP's own machinery
(measured: plan/overheads.py), and across machines what its collectives took from a step
there; each process's shard of the training state; their transient tensors."""

from __future__ import annotations

from typing import Optional

from ...parallel.config import DDP, FSDP, SPLIT, ParallelConfig
from ...parallel.dims import DP_REPLICATE, DP_SHARD, ParallelDims
from ...strategies.base import MeshOptions
from .. import formulas as f
from ..probe import Probe
from ..scenario import Scenario
from .registry import CostTerms, register
from .step import beyond_the_model
from .terms import Step, Terms

#: FSDP's backward of its largest block holds that block gathered, its gradient whole and the
#: shard the reduce-scatter returns (the next block's prefetch lands after they are freed):
#: measured with `--steady-memory`, 2.5 blocks above the states on the 134 MB MLP's 67 MB block.
FSDP_GATHERED_BLOCKS = 2.5


def state_divisor(config: ParallelConfig) -> int:
    """FSDP shards parameters, gradients and optimizer state; DDP keeps them whole."""
    return config.dims.shards if config.data_parallel == FSDP else 1


def ddp_comm(probe: Probe, s: Scenario) -> float:
    """DDP's gradients of the whole model all-reduced over every process, bucket by bucket."""
    return f.ddp_comm_seconds(list(probe.footprint.grad_tensor_bytes), s.world_size, s.busbw, s.alpha_s)


def measured_ddp_exposed(probe: Probe, s: Scenario) -> Optional[float]:
    """What the all-reduce cost inside the probe's real DDP steps, when the scenario is the
    one they ran (this machine, or the hosts measured across; as many processes, as many
    threads each); None otherwise."""
    m = probe.ddp_step if s.nodes == 1 else probe.network_ddp_step
    if m is None or s.world_size != m.world_size or s.threads != m.threads or s.oversubscription != 1:
        return None
    return m.exposed_comm_s


def communication(probe: Probe, s: Scenario, config: ParallelConfig, held_bytes: float, grad_tensors: list[float],
                  units: int, largest_unit: float) -> float:
    """The data-parallel dimensions' communication for this process's share of the model:
    DDP's buckets over dp_replicate; FSDP's gathers and reduce-scatters over its shards, and
    (HSDP) the shards' all-reduce over dp_replicate."""
    dims = config.dims
    fp = probe.footprint
    if config.data_parallel == DDP:
        group = s.group(dims.span(DP_REPLICATE))
        return f.ddp_comm_seconds(grad_tensors, dims.dp_replicate, group.busbw, group.alpha_s)
    grad_bytes = held_bytes * fp.grad_bytes / max(1, fp.param_bytes)
    shard = s.group(dims.span(DP_SHARD))
    gathers = 1 if config.option("reshard_after_forward") is False else 2
    comm = f.fsdp_comm_seconds(held_bytes, grad_bytes, dims.shards, units, shard.busbw(largest_unit), shard.alpha_s,
                               gathers, *shard.gather_scatter_ratios())
    if dims.dp_replicate > 1:
        replicas = s.group(dims.span(DP_REPLICATE))
        piece = grad_bytes / dims.shards
        comm += f.ring_all_reduce_seconds(piece, dims.dp_replicate, replicas.busbw(piece), replicas.alpha_s)
    return comm


def fsdp_network_seconds(probe: Probe) -> float:
    """What FSDP's collectives across machines cost the step beyond the all-gathers and
    reduce-scatters timed alone, per byte of parameters a process gathers across them: where
    the probe timed a real FSDP step across the hosts (--hosts), what it took beyond this
    model's prediction of it. On hosts whose network stack runs on the cores the step needs
    (one-core test-bed hosts: FSDP ×2's compute took 58–60 ms where one process takes 45), the
    collectives' threads take that time from the step. 0 where not measured."""
    measured = probe.network_fsdp_step
    config = ParallelConfig("fsdp", MeshOptions(), ParallelDims(dp_shard=measured.world_size), FSDP) \
        if measured is not None else None  # what that step ran: FSDP over every process
    beyond = beyond_the_model(probe, measured, config) if measured is not None and probe.footprint is not None else None
    gathered = probe.footprint.param_bytes * (1 - 1 / measured.world_size) if beyond is not None else 0.0
    return beyond / gathered if gathered > 0 else 0.0


def _split_replicas(step: Step) -> Terms:
    """DDP over replicas that are each split over a process's devices (DDP + model parallel):
    the whole replica's gradients all-reduced, hidden behind the backward after them."""
    comm = ddp_comm(step.probe, step.s)
    exposed = f.exposed_seconds(comm, f.BACKWARD_SHARE * step.compute.fb_s, step.machine.overlap)
    return Terms(comm_s=comm, exposed_s=exposed)


def terms(step: Step) -> Terms:
    probe, s, config, c, machine = step.probe, step.s, step.config, step.compute, step.machine
    if config.local_devices == SPLIT:
        return _split_replicas(step)
    fp, dims = probe.footprint, config.dims
    machinery = 0.0
    if config.data_parallel == FSDP:
        # FSDP's copies and bookkeeping for the share held, on cores shared as the arithmetic's
        # are; across machines what its gathers took from the step there, for the bytes
        # gathered across them (`step.machinery` False: without this measured term).
        machinery = probe.fsdp_overhead_s * step.stage_fraction * step.tp_share * s.oversubscription
        if step.machinery and s.group(dims.span(DP_SHARD)).nodes > 1:
            machinery += fsdp_network_seconds(probe) * step.held * (1 - 1 / dims.shards) * s.oversubscription
    grads = [b * step.stage_fraction * step.tp_share for b in fp.grad_tensor_bytes]
    largest = max(fp.block_param_bytes[i] for i in step.stage) * step.tp_share
    comm = communication(probe, s, config, step.held, grads, len(step.stage), largest)
    # DDP hides its buckets behind the part of backward after them; FSDP's prefetches hide
    # behind forward and backward alike.
    hideable = (f.BACKWARD_SHARE if config.data_parallel == DDP else 1.0) * c.fb_s * step.work_share
    exposed = f.exposed_seconds(comm, hideable, machine.overlap)
    if config.data_parallel == DDP and machine.overlap < 1 and s.nodes > 1 and s.link is not None:
        # Across machines, of DDP's all-reduce only the cores' own part (what it takes on this
        # machine's link) needs the cores; the rest is the network's time, during which the
        # cores go on with the backward that the later buckets wait for.
        on_cores = min(comm, communication(probe, s.group(1), config, step.held, grads, len(step.stage), largest))
        exposed = f.exposed_seconds(on_cores, hideable, machine.overlap) + max(0.0, comm - on_cores - hideable)
    note = ""
    if config.data_parallel == DDP and dims.enabled() in ((), (DP_REPLICATE,)):
        # Where the probe ran real DDP steps on this many processes, their exposed
        # communication: the all-reduce timed alone misses the ranks waiting for each other,
        # which decides a step of a few milliseconds.
        measured = measured_ddp_exposed(probe, s)
        if measured is not None:
            exposed = measured
            # No figures: a prediction's note is one round's, its figures the rounds' medians.
            note = "communication as measured in the probe's DDP steps, not modelled from the all-reduce alone"
    return Terms(compute_s=machinery, comm_s=comm, exposed_s=exposed, note=note)


def transient_bytes(probe: Probe, config: ParallelConfig, held: float, largest_unit: float, largest_tensor: float,
                    shards: int) -> float:
    """DDP: a gradient computed before it is copied into its bucket (Gloo's ring works in the
    bucket and a few small buffers: a DDP process of two peaked 4 MB above one of one on the
    134 MB MLP). FSDP: a block gathered whole, its gradient whole and its shard from the
    reduce-scatter; with reshard_after_forward false (or N) the blocks also stay gathered (N
    ways) from forward to backward."""
    if config.data_parallel == DDP:
        return float(largest_tensor)
    fp = probe.footprint
    gathered = FSDP_GATHERED_BLOCKS * largest_unit
    reshard = config.option("reshard_after_forward", True)
    if reshard is False:
        gathered += fp.param_bytes * held * (1 - 1 / shards)
    elif isinstance(reshard, int) and not isinstance(reshard, bool) and reshard > 1:
        gathered += fp.param_bytes * held * (1 / reshard - 1 / shards)
    return gathered


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(world_size: int, batch_size: int, blocks: int, tensor_parallel: bool,
               sequence: int = 0) -> list[tuple[str, dict]]:
    """One process alone (on one: nothing to synchronise or shard), DDP and FSDP over every
    process, and hybrid sharding (HSDP) at every number of replicas in between."""
    if world_size == 1:
        return [("single", {})]
    found = [("ddp", {}), ("fsdp", {})]
    return found + [("fsdp", {"dp_replicate": r}) for r in _divisors(world_size) if 1 < r < world_size]


COSTS = register(CostTerms("data_parallel", state_divisor=state_divisor, terms=terms, transient_bytes=transient_bytes,
                          candidates=candidates))
