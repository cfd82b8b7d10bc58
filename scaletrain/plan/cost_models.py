"""The cost model of each strategy: one step's compute, communication and memory per device,
from a round of measurements (Probe) and where the processes run (Scenario).

Every model returns {"compute", "comm", "exposed", "batch", "memory"} (seconds, seconds,
seconds, samples, bytes) and optionally a "note"; None when the strategy cannot run there.
"""

from __future__ import annotations

from typing import Callable, Optional

from . import formulas as f
from .probe import Probe
from .scenario import Options, Scenario, compute_at, one_process_threads
from .stages import stage_costs, stage_groups

#: Share of a step's forward + backward that is backward, behind which DDP hides its all-reduce.
BACKWARD_SHARE = 2 / 3


def _activations(probe: Probe) -> float:
    return probe.footprint.activation_bytes_per_sample * probe.batch_size


def _replicated_memory(probe: Probe) -> float:
    fp = probe.footprint
    return f.memory_replicated(fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes, _activations(probe))


def devices_per_process(probe: Probe, options: Options, default_on_cpu: int) -> int:
    """--devices-per-process, else the GPUs visible; on a CPU `default_on_cpu` parts share it."""
    if options.devices_per_process:
        return options.devices_per_process
    if probe.device_type == "cuda":
        return max(1, options.procs_per_node)
    return default_on_cpu


def ddp_comm(probe: Probe, s: Scenario) -> float:
    """DDP's gradients all-reduced bucket by bucket, each at the bandwidth of its size."""
    buckets = f.ddp_buckets(list(probe.footprint.grad_tensor_bytes))
    return sum(f.ring_all_reduce_seconds(b, s.world_size, s.busbw(b), s.alpha_s) for b in buckets)


def measured_ddp_exposed(probe: Probe, s: Scenario) -> Optional[float]:
    """What the all-reduce cost inside the probe's real DDP steps, when the scenario is the
    one they ran (this machine, as many processes, as many threads each); None otherwise."""
    m = probe.ddp_step
    if m is None or s.nodes != 1 or s.world_size != m.world_size or s.threads != m.threads or s.oversubscription != 1:
        return None
    return m.exposed_comm_s


def _single(probe: Probe, s: Scenario, o: Options) -> Optional[dict]:
    if s.world_size != 1:
        return None
    c = compute_at(probe, one_process_threads(probe, o))
    return {"compute": c.step_s, "comm": 0.0, "exposed": 0.0, "batch": probe.batch_size,
            "memory": _replicated_memory(probe)}


def _ddp(probe: Probe, s: Scenario, o: Options) -> dict:
    """Where the probe ran real DDP steps (this machine's process count), the exposed
    communication is theirs: the all-reduce timed alone misses the ranks waiting for each
    other, which decides a step of a few milliseconds. Elsewhere, the α/β model."""
    c = compute_at(probe, s.threads, s.oversubscription)
    comm = ddp_comm(probe, s)
    modelled = f.exposed_seconds(comm, BACKWARD_SHARE * c.fb_s, o.overlap)
    measured = measured_ddp_exposed(probe, s)
    cost = {"compute": c.step_s, "comm": comm, "exposed": modelled if measured is None else measured,
            "batch": probe.batch_size * s.world_size, "memory": _replicated_memory(probe)}
    if measured is not None:
        # No figures: a prediction's note is one round's, its figures the rounds' medians.
        cost["note"] = "communication as measured in the probe's DDP steps, not modelled from the all-reduce alone"
    return cost


def _fsdp(probe: Probe, s: Scenario, o: Options) -> dict:
    fp = probe.footprint
    c = compute_at(probe, s.threads, s.oversubscription)
    units = max(1, len(fp.block_param_bytes))
    comm = f.fsdp_comm_seconds(fp.param_bytes, fp.grad_bytes, s.world_size, units,
                               s.busbw(fp.largest_block_param_bytes), s.alpha_s)
    memory = f.memory_sharded(fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes, _activations(probe), s.world_size,
                              fp.largest_block_param_bytes)
    # Prefetching the next unit's parameters hides gathers behind forward and backward alike.
    return {"compute": c.step_s, "comm": comm, "exposed": f.exposed_seconds(comm, c.fb_s, o.overlap),
            "batch": probe.batch_size * s.world_size, "memory": memory}


def _staged(probe: Probe, s: Scenario, stages: int, microbatches: int, threads: int, oversubscription: float,
            transfer: float, one_process: bool = False) -> Optional[dict]:
    """A step of `stages` consecutive stages (pipeline processes, or mp's parts on their
    devices) running `microbatches` micro-batches at the pace of the slowest stage."""
    fp = probe.footprint
    groups = stage_groups(probe.block_params or tuple(fp.block_param_bytes), stages)
    if groups is None:
        return None  # more stages than the model has blocks
    c = compute_at(probe, threads, oversubscription)
    costs = stage_costs(probe, c, groups, microbatches)
    stage_bytes = max(sum(fp.block_param_bytes[i] for i in g) for g in groups)
    memory = f.memory_pipeline(stage_bytes, fp.param_bytes, fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes,
                               _activations(probe), stages, microbatches)
    return {"compute": c.data_s + costs.busy_seconds(microbatches, one_process), "comm": transfer, "exposed": transfer,
            "batch": probe.batch_size, "memory": memory,
            "note": f"{costs.describe()}; bubble {f.pipeline_bubble(stages, microbatches):.0%} of an even split"}


def _activation_transfers(probe: Probe, s: Scenario, stages: int, microbatches: int) -> float:
    """Each micro-batch crosses the stage boundaries forward (activations) and backward
    (their gradients); on the critical path, 2(m + p - 2) of them."""
    if stages == 1:
        return 0.0
    size = probe.footprint.boundary_bytes_per_sample * probe.batch_size / microbatches
    return 2 * (microbatches + stages - 2) * (size / s.busbw(size) + s.alpha_s)


def _pipeline(probe: Probe, s: Scenario, o: Options) -> Optional[dict]:
    p, m = s.world_size, o.microbatches
    return _staged(probe, s, p, m, s.threads, s.oversubscription, _activation_transfers(probe, s, p, m))


def _mp_part(probe: Probe, s: Scenario, o: Options, threads: int) -> Optional[dict]:
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


def _mp(probe: Probe, s: Scenario, o: Options) -> Optional[dict]:
    if s.world_size != 1:
        return None
    return _mp_part(probe, s, o, one_process_threads(probe, o))


def _hybrid(probe: Probe, s: Scenario, o: Options) -> Optional[dict]:
    """DDP over processes whose replicas are cut like mp's: mp's step at the threads each
    process gets, plus DDP's all-reduce of the whole replica's gradients."""
    cost = _mp_part(probe, s, o, s.threads)
    if cost is None:
        return None
    comm = ddp_comm(probe, s)
    hideable = BACKWARD_SHARE * compute_at(probe, s.threads, s.oversubscription).fb_s
    exposed = f.exposed_seconds(comm, hideable, o.overlap)
    return {**cost, "comm": cost["comm"] + comm, "exposed": cost["exposed"] + exposed,
            "batch": probe.batch_size * s.world_size}


def _dp(probe: Probe, s: Scenario, o: Options) -> Optional[dict]:
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


#: The cost model of each strategy; strategies without one get no prediction.
COST_MODELS: dict[str, Callable[[Probe, Scenario, Options], Optional[dict]]] = {
    "single": _single, "dp": _dp, "mp": _mp, "ddp": _ddp, "hybrid": _hybrid, "pipeline": _pipeline, "fsdp": _fsdp,
}
