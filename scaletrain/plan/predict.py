"""Predictions per strategy and world size, from a Probe and the cost model's formulas.

Where the processes run: `procs_per_node` processes on each machine like this one (one per
GPU, or one per core on a CPU), as many machines as the world size needs. On a CPU the
processes of a machine share its cores, so each gets cores ÷ processes threads, and its
compute is the probe's step time measured at that thread count (not the one-process time
divided by n: fewer threads per process do not make a step proportionally slower). Across
machines the ring runs at the slower of the measured bus bandwidth and the network link.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Optional

from . import formulas as f
from .probe import Link, Probe

#: Share of a step's compute that is backward, behind which DDP hides its all-reduce.
BACKWARD_SHARE = 2 / 3


@dataclass(frozen=True)
class Scenario:
    world_size: int
    procs_per_node: int
    nodes: int
    threads: int
    busbw: float
    alpha_s: float
    oversubscription: float = 1.0
    """More processes than cores on a CPU machine: each gets this share less of a core."""


@dataclass(frozen=True)
class Options:
    procs_per_node: int
    cores: int
    link_gbps: float
    link_latency_s: float
    overlap: float
    microbatches: int
    device_memory_bytes: float


@dataclass
class Prediction:
    strategy: str
    world_size: int
    nodes: int
    threads: int
    global_batch: int
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    step_s: float
    samples_per_s: float
    speedup: float
    efficiency: float
    memory_bytes: float
    fits: bool
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def threads_needed(world_sizes: list[int], options: Options, device_type: str) -> list[int]:
    """The thread counts whose one-process step time the predictions need, largest first."""
    if device_type == "cuda":
        return [max(1, options.cores // max(1, options.procs_per_node))]
    return sorted({max(1, options.cores // min(n, options.procs_per_node)) for n in [1, *world_sizes]},
                  reverse=True)


def scenario(n: int, options: Options, link: Link, device_type: str) -> Scenario:
    per_node = min(n, options.procs_per_node)
    nodes = math.ceil(n / per_node)
    threads = max(1, options.cores // (options.procs_per_node if device_type == "cuda" else per_node))
    busbw, alpha = link.busbw, link.alpha_s
    if nodes > 1:  # the ring crosses the network: as slow as the slower of the two
        busbw = min(busbw, options.link_gbps * 1e9 / 8)
        alpha = max(alpha, options.link_latency_s)
    crowded = per_node / options.cores if device_type != "cuda" and per_node > options.cores else 1.0
    return Scenario(n, per_node, nodes, threads, busbw, alpha, crowded)


def _compute(probe: Probe, threads: int, oversubscription: float = 1.0) -> float:
    nearest = threads if threads in probe.step_s else min(probe.step_s, key=lambda t: abs(t - threads))
    return probe.step_s[nearest] * oversubscription


def _single(probe: Probe, s: Scenario, o: Options) -> Optional[dict]:
    if s.world_size != 1:
        return None
    fp = probe.footprint
    memory = f.memory_replicated(fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes,
                                 fp.activation_bytes_per_sample * probe.batch_size)
    return {"compute": _compute(probe, s.threads, s.oversubscription), "comm": 0.0, "exposed": 0.0, "batch": probe.batch_size,
            "memory": memory}


def _ddp(probe: Probe, s: Scenario, o: Options) -> dict:
    fp = probe.footprint
    compute = _compute(probe, s.threads, s.oversubscription)
    comm = f.ddp_comm_seconds(list(fp.grad_tensor_bytes), s.world_size, s.busbw, s.alpha_s)
    memory = f.memory_replicated(fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes,
                                 fp.activation_bytes_per_sample * probe.batch_size)
    return {"compute": compute, "comm": comm, "exposed": f.exposed_seconds(comm, BACKWARD_SHARE * compute, o.overlap),
            "batch": probe.batch_size * s.world_size, "memory": memory}


def _fsdp(probe: Probe, s: Scenario, o: Options) -> dict:
    fp = probe.footprint
    compute = _compute(probe, s.threads, s.oversubscription)
    units = max(1, len(fp.block_param_bytes))
    comm = f.fsdp_comm_seconds(fp.param_bytes, fp.grad_bytes, s.world_size, units, s.busbw, s.alpha_s)
    memory = f.memory_sharded(fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes,
                              fp.activation_bytes_per_sample * probe.batch_size, s.world_size,
                              fp.largest_block_param_bytes)
    # Prefetching the next unit's parameters hides gathers behind forward and backward alike.
    return {"compute": compute, "comm": comm, "exposed": f.exposed_seconds(comm, compute, o.overlap),
            "batch": probe.batch_size * s.world_size, "memory": memory}


def _pipeline(probe: Probe, s: Scenario, o: Options) -> Optional[dict]:
    fp = probe.footprint
    p, m = s.world_size, o.microbatches
    stage = f.largest_stage_bytes(list(fp.block_param_bytes), p)
    if stage is None:
        return None  # more stages than the model has blocks
    compute = _compute(probe, s.threads, s.oversubscription)
    # Each micro-batch crosses p-1 boundaries forward (activations) and backward (their gradients).
    per_transfer = fp.boundary_bytes_per_sample * probe.batch_size / m
    transfer = 0.0 if p == 1 else 2 * (m + p - 2) * (per_transfer / s.busbw + s.alpha_s)
    step = f.pipeline_step_seconds(compute, p, m, transfer)
    memory = f.memory_pipeline(stage, fp.param_bytes, fp.param_bytes, fp.grad_bytes, fp.optimizer_bytes,
                               fp.activation_bytes_per_sample * probe.batch_size, p, m)
    return {"compute": step - transfer, "comm": transfer, "exposed": transfer, "batch": probe.batch_size,
            "memory": memory, "note": f"bubble {f.pipeline_bubble(p, m):.0%} with {m} micro-batches"}


#: The cost model of each strategy; strategies without one get no prediction.
COST_MODELS: dict[str, Callable[[Probe, Scenario, Options], Optional[dict]]] = {
    "single": _single, "ddp": _ddp, "fsdp": _fsdp, "pipeline": _pipeline,
}


def baseline_step(probe: Probe, options: Options) -> float:
    """One process with every core (the threads-only baseline)."""
    return _compute(probe, options.cores if probe.device_type != "cuda" else max(probe.step_s))


def predict(probe: Probe, strategy: str, n: int, options: Options) -> Optional[Prediction]:
    model = COST_MODELS.get(strategy)
    if model is None:
        return None
    s = scenario(n, options, probe.link, probe.device_type)
    cost = model(probe, s, options)
    if cost is None:
        return None
    step = cost["compute"] + cost["exposed"]
    base = baseline_step(probe, options)
    gain = f.speedup(step, cost["batch"], base, probe.batch_size)
    return Prediction(strategy=strategy, world_size=n, nodes=s.nodes, threads=s.threads, global_batch=cost["batch"],
                      compute_s=cost["compute"], comm_s=cost["comm"], exposed_comm_s=cost["exposed"], step_s=step,
                      samples_per_s=cost["batch"] / step, speedup=gain, efficiency=gain / n,
                      memory_bytes=cost["memory"], fits=cost["memory"] <= options.device_memory_bytes,
                      note=cost.get("note", ""))


def predict_all(probe: Probe, strategies: list[str], world_sizes: list[int], options: Options) -> list[Prediction]:
    return [p for name in strategies for n in world_sizes if (p := predict(probe, name, n, options)) is not None]
