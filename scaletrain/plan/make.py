"""Measuring what a plan needs and predicting, in one call (used by `plan` and `bench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from .predict import Options, Prediction, predict_all, threads_needed
from .probe import Probe, cores_here, device_memory_bytes, load_comm_json, measure_compute, measure_link


def default_options(device_type: str, procs_per_node: Optional[int] = None, link_gbps: float = 10.0,
                    link_latency_us: float = 20.0, overlap: Optional[float] = None, microbatches: int = 4,
                    device_memory_gb: Optional[float] = None) -> Options:
    cores = cores_here()
    if procs_per_node is None:
        procs_per_node = torch.cuda.device_count() if device_type == "cuda" else cores
    if overlap is None:
        # On a CPU the collective's copies and reductions need the cores the computation is
        # using: nothing is hidden. A GPU computes while its copy engines and NCCL communicate.
        overlap = 1.0 if device_type == "cuda" else 0.0
    memory = device_memory_gb * 1e9 if device_memory_gb else device_memory_bytes(device_type, procs_per_node)
    return Options(procs_per_node=procs_per_node, cores=cores, link_gbps=link_gbps,
                   link_latency_s=link_latency_us * 1e-6, overlap=overlap, microbatches=microbatches,
                   device_memory_bytes=memory)


def make_probe(workload, spec: dict, batch_size: int, world_sizes: list[int], options: Options, *,
               device: Optional[str], backend: Optional[str], comm_json: Optional[Path], steps: int, warmup: int,
               seed: int, probe_nproc: int = 2, rounds: int = 2) -> Probe:
    """`spec`: the workload as names ({"workload", "model", "dataset"}), for the processes
    that measure it."""
    from ..devices import choose_device

    device_type = choose_device(device, 0).type
    threads = threads_needed(world_sizes, options, device_type)
    spec = {**spec, "batch_size": batch_size, "device": device, "seed": seed}
    step_s, footprint = measure_compute(workload, spec, threads, copies_per_thread_count(threads, options, device_type),
                                        steps, warmup, rounds)
    message = max(_buckets(footprint) or [1])  # the largest message DDP will send
    link = (load_comm_json(comm_json, message) if comm_json
            else measure_link(message, probe_nproc, backend, device))
    return Probe(workload=workload.name, batch_size=batch_size, device_type=device_type, cores=options.cores,
                 step_s=step_s, footprint=footprint, link=link)


def copies_per_thread_count(threads: list[int], options: Options, device_type: str) -> dict[int, int]:
    """How many processes share a CPU machine when each has `t` threads: cores ÷ t (at most
    the processes per machine). On GPUs each process has its own device: one copy."""
    if device_type == "cuda":
        return {t: 1 for t in threads}
    return {t: max(1, min(options.procs_per_node, options.cores // t)) for t in threads}


def _buckets(footprint) -> list[int]:
    from .formulas import ddp_buckets

    return ddp_buckets(list(footprint.grad_tensor_bytes)) or ([footprint.grad_bytes] if footprint.grad_bytes else [])


def plan(probe: Probe, strategies: list[str], world_sizes: list[int], options: Options) -> list[Prediction]:
    return predict_all(probe, strategies, world_sizes, options)
