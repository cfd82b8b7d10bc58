"""Device and CPU-thread placement for one process."""

from __future__ import annotations

import os

import torch

from .errors import UsageError


def cpu_cores() -> int:
    """Cores this process may run on (honours taskset/cgroup affinity, not just the machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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
    if requested in (None, "", "auto"):
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
