"""Device and CPU-thread placement for one process."""

from __future__ import annotations

import os

import torch

from ..foundation.errors import UsageError
from ..foundation.text_values import AUTO
from .cores import cpu_cores

__all__ = ["cpu_cores", "threads_per_process", "choose_device", "core_set", "pin_cores"]


def threads_per_process(local_world_size: int, requested: int | None = None) -> int:
    """Cores divided among the processes of this node, at least 1: processes that each
    use every core fight over them and run slower than if they shared them fairly."""
    if requested is not None:
        if requested < 1:
            raise UsageError(f"--threads {requested}: need at least 1 thread per process")
        return requested
    return max(1, cpu_cores() // max(1, local_world_size))


def choose_device(requested: str | None, local_rank: int) -> torch.device:
    """One device per process, picked by the local rank: cuda:<local_rank> when CUDA is here."""
    if requested in (None, "", AUTO):
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        return torch.device("cpu")
    if requested == "cpu":
        return torch.device("cpu")
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {requested}: no CUDA device is visible here; use --device cpu")
        if requested == "cuda":
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        return torch.device(requested)
    raise UsageError(f"unknown device {requested!r}; use cpu, cuda or cuda:N")


def _physical_core_order(cpus: list[int]) -> list[int]:
    """`cpus` ordered so that the hardware threads of one physical core sit side by side:
    splitting this list into runs gives each process whole cores, not half of two."""
    def core_of(cpu: int) -> tuple[int, int]:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{base}/physical_package_id") as pkg, open(f"{base}/core_id") as core:
                return int(pkg.read()), int(core.read())
        except (OSError, ValueError):
            return 0, cpu
    return sorted(cpus, key=lambda cpu: (*core_of(cpu), cpu))


def core_set(local_rank: int, local_world_size: int, cpus: list[int]) -> list[int]:
    """This local rank's share of `cpus`: disjoint, contiguous runs of (nearly) equal size."""
    ordered = _physical_core_order(sorted(cpus))
    per, extra = divmod(len(ordered), local_world_size)
    start = local_rank * per + min(local_rank, extra)
    return ordered[start:start + per + (1 if local_rank < extra else 0)]


def pin_cores(local_rank: int, local_world_size: int) -> list[int] | None:
    """Binds this process to its own share of the cores, so the processes of a node do not
    migrate onto each other's cores and evict each other's caches. Returns the cores, or
    None when it left the affinity alone: one process per node, fewer cores than processes,
    not Linux, or a launcher (mpirun --bind-to, srun --cpu-bind) already narrowed this
    process's cores compared with its parent's, which we respect."""
    if local_world_size < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        mine = os.sched_getaffinity(0)
        parents = os.sched_getaffinity(os.getppid())
    except OSError:
        return None
    if mine != parents or len(mine) < local_world_size:
        return None
    cores = core_set(local_rank, local_world_size, list(mine))
    os.sched_setaffinity(0, cores)
    return cores
