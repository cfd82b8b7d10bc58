"""The cost model of each strategy: one step's compute, communication and memory per device,
from a round of measurements (Probe) and where the processes run (Scenario).

Every model returns {"compute", "comm", "exposed", "batch", "memory"} (seconds, seconds,
seconds, samples, bytes) and optionally a "note"; None when the strategy cannot run there.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from ..parallel.config import DDP, FSDP, SPLIT, ParallelConfig
from ..parallel.dims import DP_REPLICATE, DP_SHARD
from . import formulas as f
from .configuration import configuration
from .machine import Machine
from .memory_model import peak_bytes
from .probe import MeshStep, Probe
from .scenario import Scenario, compute_at, one_process_threads, scenario
from .stages import stage_costs, stage_groups


def _activations(probe: Probe) -> float:
    return probe.footprint.activation_bytes_per_sample * probe.batch_size


def _replicated_memory(probe: Probe) -> float:
    fp = probe.footprint
    return f.memory_replicated(fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes, _activations(probe))


def devices_per_process(probe: Probe, options: Machine, default_on_cpu: int) -> int:
    """--devices-per-process, else the GPUs visible; on a CPU `default_on_cpu` parts share it."""
    if options.devices_per_process:
        return options.devices_per_process
    if probe.device_type == "cuda":
        return max(1, options.nproc_per_node)
    return default_on_cpu


def ddp_comm(probe: Probe, s: Scenario) -> float:
    """DDP's gradients all-reduced bucket by bucket, each at the bandwidth of its size."""
    return f.ddp_comm_seconds(list(probe.footprint.grad_tensor_bytes), s.world_size, s.busbw, s.alpha_s)


def measured_ddp_exposed(probe: Probe, s: Scenario) -> Optional[float]:
    """What the all-reduce cost inside the probe's real DDP steps, when the scenario is the
    one they ran (this machine, or the hosts measured across; as many processes, as many
    threads each); None otherwise."""
    m = probe.ddp_step if s.nodes == 1 else probe.network_ddp_step
    if m is None or s.world_size != m.world_size or s.threads != m.threads or s.oversubscription != 1:
        return None
    return m.exposed_comm_s


def _single(probe: Probe, s: Scenario, o: Machine) -> Optional[dict]:
    if s.world_size != 1:
        return None
    c = compute_at(probe, one_process_threads(probe, o))
    return {"compute": c.step_s, "comm": 0.0, "exposed": 0.0, "batch": probe.batch_size,
            "memory": _replicated_memory(probe)}


def _staged(probe: Probe, s: Scenario, stages: int, microbatches: int, threads: int, oversubscription: float,
            transfer: float, one_process: bool = False) -> Optional[dict]:
    """A step of `stages` consecutive stages (pipeline processes, or mp's parts on their
    devices) running `microbatches` micro-batches at the pace of the slowest stage."""
    fp = probe.footprint
    groups = stage_groups(probe.block_params or tuple(fp.block_param_bytes), stages)
    if groups is None:
        return None  # more stages than the model has blocks
    c = compute_at(probe, threads, oversubscription)
    costs = stage_costs(probe, c, groups, microbatches, threads=threads)
    stage_bytes = max(sum(fp.block_param_bytes[i] for i in g) for g in groups)
    memory = f.memory_pipeline(stage_bytes, fp.param_bytes, fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes,
                               _activations(probe), stages, microbatches)
    return {"compute": c.data_s + costs.busy_seconds(microbatches, one_process), "comm": transfer, "exposed": transfer,
            "batch": probe.batch_size, "memory": memory,
            "note": f"{costs.describe()}; bubble {f.pipeline_bubble(stages, microbatches):.0%} of an even split"}


def _activation_transfers(probe: Probe, s: Scenario, stages: int, microbatches: int,
                          slowest_stage_s: float = 0.0, groups: Optional[list[list[int]]] = None) -> float:
    """Each micro-batch crosses the stage boundaries forward (activations) and backward
    (their gradients). The schedule sends and receives while the stages compute, so the
    critical path holds the first micro-batch's way down and the last one's way back, 2(p − 1)
    transfers, and of each further micro-batch's only what its transfer takes beyond the
    slowest stage's compute (a link slower than the stages sets the pace)."""
    if stages == 1:
        return 0.0
    one = _one_transfer(probe, s, microbatches, groups)
    return 2 * (stages - 1) * one + (microbatches - 1) * max(0.0, one - slowest_stage_s)


def _one_transfer(probe: Probe, s: Scenario, microbatches: int, groups: Optional[list[list[int]]] = None) -> float:
    """Seconds to send one micro-batch's activations across the largest cut."""
    fp = probe.footprint
    per_sample = fp.boundary_bytes_per_sample
    if groups and fp.unit_output_bytes_per_sample:  # the outputs at the cuts, not every unit's
        per_sample = max(fp.unit_output_bytes_per_sample[g[-1]] for g in groups[:-1])
    size = per_sample * probe.batch_size / microbatches
    return size / s.busbw(size) + s.alpha_s


def _boundary_latencies(s: Scenario, dims) -> list[float]:
    """The latency between each pair of consecutive pipeline stages: the network's where they
    are on different machines (the pipeline is the mesh's outermost dimension, so a stage's
    processes are consecutive ranks), this machine's otherwise."""
    ranks = s.world_size // dims.pp
    local = s.link.alpha_s if s.link else 0.0
    return [s.alpha_s if (j * ranks) // s.nproc_per_node != ((j + 1) * ranks) // s.nproc_per_node else local
            for j in range(dims.pp - 1)]


def _mp_part(probe: Probe, s: Scenario, o: Machine, threads: int) -> Optional[dict]:
    """One process whose model is cut into K parts on K devices. On GPUs the parts work at
    once on different micro-batches (the strategy's default is 1 micro-batch: none overlap);
    on a CPU every part is on the same device, so the parts take turns."""
    parts = devices_per_process(probe, o, default_on_cpu=2)
    if probe.device_type != "cuda":
        cost = _staged(probe, s, parts, 1, threads, s.oversubscription, 0.0, one_process=True)
        if cost is not None:
            cost["note"] = f"{parts} parts on the one CPU take turns"
        return cost
    return _staged(probe, s, parts, 1, threads, s.oversubscription, _activation_transfers(probe, s, parts, 1),
                   one_process=True)


def _mp(probe: Probe, s: Scenario, o: Machine) -> Optional[dict]:
    if s.world_size != 1:
        return None
    return _mp_part(probe, s, o, one_process_threads(probe, o))


def _ddp_model_parallel(probe: Probe, s: Scenario, o: Machine) -> Optional[dict]:
    """DDP over processes whose replicas are cut like mp's: mp's step at the threads each
    process gets, plus DDP's all-reduce of the whole replica's gradients."""
    cost = _mp_part(probe, s, o, s.threads)
    if cost is None:
        return None
    comm = ddp_comm(probe, s)
    hideable = f.BACKWARD_SHARE * compute_at(probe, s.threads, s.oversubscription).fb_s
    exposed = f.exposed_seconds(comm, hideable, o.overlap)
    return {**cost, "comm": cost["comm"] + comm, "exposed": cost["exposed"] + exposed,
            "batch": probe.batch_size * s.world_size}


def _dp(probe: Probe, s: Scenario, o: Machine) -> Optional[dict]:
    """DataParallel: one process, the batch split over its k devices; every step copies the
    parameters to the k-1 other devices and sums their gradients back onto the first, at
    the measured bus bandwidth. With one device (a CPU) it is one process's step."""
    if s.world_size != 1:
        return None
    k = devices_per_process(probe, o, default_on_cpu=1)
    c = compute_at(probe, one_process_threads(probe, o))
    if k == 1:
        return {"compute": c.step_s, "comm": 0.0, "exposed": 0.0, "batch": probe.batch_size,
                "memory": _replicated_memory(probe), "note": "one device: DataParallel runs one replica"}
    fp = probe.footprint
    moved = fp.param_bytes + fp.grad_bytes
    comm = moved / s.busbw(moved) + 2 * (k - 1) * s.alpha_s
    memory = f.memory_replicated(fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes, _activations(probe) / k)
    return {"compute": c.data_s + c.fb_s / k + c.optimizer_s, "comm": comm, "exposed": comm,
            "batch": probe.batch_size, "memory": memory, "note": f"{k} devices, a replica on each"}


def _tp_share(fp, tp: int, units: Optional[list[int]] = None) -> float:
    """The share of the (stage's) parameters — and, roughly, of its arithmetic — a process holds
    under tensor parallel: what the plan splits, 1/tp of it, and the rest whole."""
    blocks = range(len(fp.block_param_bytes)) if units is None else units
    total = sum(fp.block_param_bytes[i] for i in blocks) or 1
    if tp == 1 or not fp.block_tp_param_bytes:
        return 1.0
    split = sum(fp.block_tp_param_bytes[i] for i in blocks)
    return (total - split + split / tp) / total


def _tp_comm(probe: Probe, s: Scenario, config: ParallelConfig, units: list[int], samples: float, times: int) -> float:
    """Tensor parallel's all-reduces: each row-wise layer's output in forward, as many input
    gradients in backward, `times` times (once per micro-batch) for `samples` samples each."""
    tp = config.dims.tp
    if tp == 1:
        return 0.0
    group = s.group(tp)
    per_sample = [probe.footprint.block_tp_reduce_bytes_per_sample[i] for i in units]
    return times * sum(2 * f.ring_all_reduce_seconds(b * samples, tp, group.busbw(b * samples), group.alpha_s)
                       for b in per_sample if b)


def _data_parallel_comm(probe: Probe, s: Scenario, config: ParallelConfig, held_bytes: float, grad_tensors: list[float],
                        units: int, largest_unit: float) -> float:
    """The data-parallel dimensions' communication for this process's share of the model:
    DDP's buckets over dp_replicate; FSDP's gathers and reduce-scatters over dp_shard, and
    (HSDP) the shards' all-reduce over dp_replicate."""
    dims = config.dims
    fp = probe.footprint
    if config.data_parallel == DDP:
        group = s.group(dims.span(DP_REPLICATE))
        return f.ddp_comm_seconds(grad_tensors, dims.dp_replicate, group.busbw, group.alpha_s)
    if config.data_parallel != FSDP:
        return 0.0
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


#: Share of forward + backward that activation checkpointing computes again: the whole forward;
#: the operator-level policy recomputes only cheap operations.
RECOMPUTED = {"full": f.FORWARD_SHARE, "selective": 0.1}


def recompute_seconds(config: ParallelConfig, forward_backward_s: float) -> float:
    """What activation checkpointing adds to a step: the checkpointed blocks' forward again."""
    mode = config.option("activation_checkpointing", "none")
    if mode == "none":
        return 0.0
    every = config.option("ac_every")
    share = RECOMPUTED["full"] / every if every else RECOMPUTED[mode]
    return share * forward_backward_s


def _where_measured(probe: Probe, step: MeshStep) -> tuple[Machine, Scenario]:
    """The options and scenario a probe job's measured step ran in: its processes, as many on
    each machine as it had (all on this one, or the hosts' slots across the network measured)."""
    per_node = step.nproc_per_node or step.world_size
    here = Machine(nproc_per_node=per_node, cores=probe.cores, link_gbps=0.0, link_latency_s=0.0,
                   overlap=0.0 if probe.device_type != "cuda" else 1.0, device_memory_bytes=math.inf)
    return here, scenario(step.world_size, here, probe.link, probe.device_type, probe.network)


def _beyond_the_model(probe: Probe, step: MeshStep, strategy: str) -> Optional[float]:
    """What `step` (a `strategy` step of the whole mesh) took beyond this cost model's
    prediction of it without the measured terms, per process of a core of its own: measured on
    more processes than cores (a one-core machine's job), the machinery's time is stretched as
    the arithmetic's is, and the configurations stretch it again by theirs. None where the
    model cannot predict that step."""
    config = configuration(strategy, step.world_size)
    if config is None:
        return None
    here, s = _where_measured(probe, step)
    cost = _mesh(probe, s, here, config, machinery=False)
    if cost is None:
        return None
    return max(0.0, step.step_s - (cost["compute"] + cost["exposed"])) / s.oversubscription


def tp_machinery_seconds(probe: Probe) -> float:
    """What tensor parallel's own machinery adds to a step of the whole model (plan/overheads.py):
    where the probe timed a real tensor-parallel step across its processes, what that step took
    beyond this model's prediction of it without this term — DTensor's dispatch and the ranks
    waiting for each other at every layer; otherwise the mesh-of-one step's extra time."""
    beyond = _beyond_the_model(probe, probe.tp_step, "tp") if probe.tp_step is not None else None
    return probe.tp_overhead_s if beyond is None else beyond


def fsdp_network_seconds(probe: Probe) -> float:
    """What FSDP's collectives across machines cost the step beyond the all-gathers and
    reduce-scatters timed alone, per byte of parameters a process gathers across them: where
    the probe timed a real FSDP step across the hosts (--hosts), what it took beyond this
    model's prediction of it. On hosts whose network stack runs on the cores the step needs
    (one-core test-bed hosts: FSDP ×2's compute took 58–60 ms where one process takes 45), the
    collectives' threads take that time from the step. 0 where not measured."""
    step = probe.network_fsdp_step
    beyond = _beyond_the_model(probe, step, "fsdp") if step is not None and probe.footprint is not None else None
    gathered = probe.footprint.param_bytes * (1 - 1 / step.world_size) if beyond is not None else 0.0
    return beyond / gathered if gathered > 0 else 0.0


def _mesh(probe: Probe, s: Scenario, o: Machine, config: ParallelConfig, machinery: bool = True) -> Optional[dict]:
    """Any configuration of the mesh (ddp, fsdp, tp, pipeline and their compositions), one dimension
    at a time: the pipeline's stages and bubble set the compute (each stage's measured
    blocks); tensor parallel shrinks each process's share of it and adds two all-reduces per
    row-wise layer; the data-parallel dimensions add DDP's buckets or FSDP's gathers and
    reduce-scatters for the share each process holds. Where the probe ran real DDP steps on
    this machine's process count, plain DDP's exposed communication is theirs: the
    all-reduce timed alone misses the ranks waiting for each other, which decides a step of a
    few milliseconds."""
    fp = probe.footprint
    dims = config.dims
    if dims.tp > 1 and not fp.block_tp_param_bytes:
        return None  # the model has no tensor-parallel plan: this configuration cannot run
    c = compute_at(probe, s.threads, s.oversubscription)
    per_process = probe.batch_size  # every configuration keeps the batch per process
    blocks = list(range(len(fp.block_param_bytes)))
    groups = stage_groups(probe.block_params or tuple(fp.block_param_bytes), dims.pp) if config.pipelined else [blocks]
    if groups is None:
        return None  # more stages than the model has blocks
    # The heaviest stage sets the pace; under tensor parallel a process holds its share of it.
    stage = max(groups, key=lambda g: sum(fp.block_param_bytes[i] for i in g))
    stage_fraction = sum(fp.block_param_bytes[i] for i in stage) / max(1, fp.param_bytes)
    tp_share = _tp_share(fp, dims.tp, stage)
    held = fp.param_bytes * stage_fraction * tp_share
    state_share = stage_fraction * tp_share / (dims.shards if config.data_parallel == FSDP else 1)
    note = ""
    if config.pipelined:
        m = config.microbatches
        costs = stage_costs(probe, c, groups, m, per_process, [_tp_share(fp, dims.tp, [i]) for i in blocks],
                            s.threads)
        one = _one_transfer(probe, s, m, groups) if dims.pp > 1 else 0.0
        if config.option("schedule", "1f1b") == "gpipe" or dims.pp == 1:
            busy = costs.busy_seconds(m) - max(costs.optimizer_s)
            transfer = _activation_transfers(probe, s, dims.pp, m, max(costs.per_microbatch_s), groups)
        else:  # 1F1B: the stages around the slowest one overlap with it (StageCosts.one_f_one_b)
            busy, transfer = costs.one_f_one_b(m, one)
            busy -= transfer
            if s.nodes > 1:
                # Across machines the latency is milliseconds, and each transfer waits for its
                # receiver to post its receive: played out (schedule_sim) rather than counted
                # once each way (a boundary inside a machine keeps this machine's latency).
                transfer = costs.waited_transfers(m, _boundary_latencies(s, dims), one - s.alpha_s)
        # Each stage steps its own share of the state, and a later stage's step overlaps the
        # backwards still running before it (StageCosts.optimizer_tail).
        held_share = state_share / stage_fraction if stage_fraction else 0.0
        compute = c.data_s + busy + costs.optimizer_tail(held_share, one)
        tp_comm = _tp_comm(probe, s, config, stage, per_process / m, m)
        note = f"{costs.describe()}; bubble {f.pipeline_bubble(dims.pp, m):.0%} of an even split"
    else:
        # The measured step, less the shares of forward + backward and of the optimizer step
        # that other processes take (the whole step when they take none).
        compute = c.step_s - c.fb_s * (1 - tp_share) - c.optimizer_s * (1 - state_share)
        transfer = 0.0
        tp_comm = _tp_comm(probe, s, config, stage, per_process, 1)
    compute += recompute_seconds(config, c.fb_s * tp_share)
    # The machinery's own work (plan/overheads.py), on cores shared as the arithmetic's are:
    # FSDP's copies and bookkeeping for the share held, and across machines what its gathers
    # took from the step there, for the bytes gathered across them; tensor parallel's DTensor
    # dispatch for every layer of the stage, however many ways each is split. (`machinery`
    # False: without the terms measured as a step's excess over this model.)
    if config.data_parallel == FSDP:
        compute += probe.fsdp_overhead_s * stage_fraction * tp_share * s.oversubscription
        if machinery and s.group(dims.span(DP_SHARD)).nodes > 1:  # gathers across machines
            compute += fsdp_network_seconds(probe) * held * (1 - 1 / dims.shards) * s.oversubscription
    if dims.tp > 1 and machinery:
        compute += tp_machinery_seconds(probe) * stage_fraction * s.oversubscription
    grads = [b * stage_fraction * tp_share for b in fp.grad_tensor_bytes]
    largest = max(fp.block_param_bytes[i] for i in stage) * tp_share
    dp_comm = _data_parallel_comm(probe, s, config, held, grads, len(stage), largest)
    # DDP hides its buckets behind the part of backward after them; FSDP's prefetches hide
    # behind forward and backward alike; tensor parallel's all-reduces and the pipeline's
    # transfers are on the critical path.
    hideable = (f.BACKWARD_SHARE if config.data_parallel == DDP else 1.0) * c.fb_s * tp_share
    exposed_dp = f.exposed_seconds(dp_comm, hideable, o.overlap)
    if config.data_parallel == DDP and o.overlap < 1 and s.nodes > 1 and s.link is not None:
        # Across machines, of DDP's all-reduce only the cores' own part (what it takes on this
        # machine's link) needs the cores; the rest is the network's time, during which the
        # cores go on with the backward that the later buckets wait for.
        on_cores = min(dp_comm, _data_parallel_comm(probe, s.group(1), config, held, grads, len(stage), largest))
        exposed_dp = f.exposed_seconds(on_cores, hideable, o.overlap) + max(0.0, dp_comm - on_cores - hideable)
    exposed = exposed_dp + tp_comm + transfer
    cost = {"compute": compute, "comm": dp_comm + tp_comm + transfer, "exposed": exposed,
            "batch": per_process * dims.dp_size,
            "memory": _stage_peak(probe, config, groups)}
    if config.data_parallel == DDP and dims.enabled() in ((), ("dp_replicate",)):
        measured = measured_ddp_exposed(probe, s)
        if measured is not None:
            cost["exposed"] = measured
            # No figures: a prediction's note is one round's, its figures the rounds' medians.
            note = "communication as measured in the probe's DDP steps, not modelled from the all-reduce alone"
    if note:
        cost["note"] = note
    return cost


def _stage_peak(probe: Probe, config: ParallelConfig, groups: list[list[int]]) -> float:
    """The largest of the processes' peaks: each stage's share, its blocks, its place in the pipeline."""
    fp = probe.footprint
    peaks = []
    for index, group in enumerate(groups):
        fraction = sum(fp.block_param_bytes[i] for i in group) / max(1, fp.param_bytes)
        share = _tp_share(fp, config.dims.tp, group)
        largest = max(fp.block_param_bytes[i] for i in group) * share
        peaks.append(peak_bytes(probe, config, group, fraction, share, largest, index))
    return max(peaks)


def _classic(model: Callable[[Probe, Scenario, Machine], Optional[dict]]):
    """A classic one-process cost model; its memory the process's peak (memory_model), except
    where a model split over GPUs puts a part on each device."""
    def cost(probe: Probe, s: Scenario, o: Machine, config: ParallelConfig) -> Optional[dict]:
        found = model(probe, s, o)
        if found is not None and not (config.local_devices == SPLIT and probe.device_type == "cuda"):
            found["memory"] = peak_bytes(probe, config)
        return found
    return cost


#: The cost model of each strategy: the classic one-process ones of their own, every configuration of
#: the mesh by its dimensions; strategies without one get no prediction.
COST_MODELS: dict[str, Callable[[Probe, Scenario, Machine, ParallelConfig], Optional[dict]]] = {
    "single": _classic(_single), "dp": _classic(_dp), "mp": _classic(_mp), "ddp": _mesh,
    "hybrid": _classic(_ddp_model_parallel), "pipeline": _mesh, "fsdp": _mesh, "tp": _mesh,
}
