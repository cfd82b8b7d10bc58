"""Setting up and tearing down torch.distributed's process group for one run."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from ..foundation.defaults import HANG_TIMEOUT_S
from . import netif
from .environment import DistEnv

DEFAULT_TIMEOUT = timedelta(seconds=HANG_TIMEOUT_S)

_groups_started = 0  # process groups this process has joined (every rank joins the same ones, in order)


def init_process_group(env: DistEnv, backend: str, device: torch.device, timeout: timedelta | None = None) -> bool:
    """Join the job's process group. Returns True when this call created it (and so must
    destroy it), False when the user's code had already initialised one."""
    if dist.is_initialized():
        return False
    netif.check_interfaces(os.environ)  # an interface variable naming no interface: one line, not a C++ error
    timeout = timeout or DEFAULT_TIMEOUT
    kwargs = {}
    bound = bound_device(backend, device)
    if bound is not None:
        kwargs["device_id"] = bound
    if not env.launched and env.world_size == 1:
        # One process and no launcher: an in-memory store needs no port and cannot clash.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout, **kwargs)
        return True
    netif.apply(env.master_addr, os.environ)  # the interface that reaches the master, unless the user named one
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent keeps its store across restarts, and across the groups one process
        # joins one after another (a script that calls init twice): without a prefix for each,
        # a new group can read the addresses a dead group published and fail to connect.
        global _groups_started
        _groups_started += 1
        store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=False, timeout=timeout)
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"scaletrain/group-{_groups_started}/restart-{restart}/", store)
        dist.init_process_group(backend, store=store, rank=env.rank, world_size=env.world_size, timeout=timeout,
                                **kwargs)
        return True
    host = f"[{env.master_addr}]" if ":" in env.master_addr else env.master_addr
    dist.init_process_group(backend, init_method=f"tcp://{host}:{env.master_port}", rank=env.rank,
                            world_size=env.world_size, timeout=timeout, **kwargs)
    return True


def bound_device(backend: str, device: torch.device) -> Optional[torch.device]:
    """The device to bind the process group to (`init_process_group(device_id=...)`), or None.

    Only NCCL uses it: bound, NCCL connects eagerly and never guesses a rank's GPU. Gloo has
    nothing to bind, and a bound Gloo group breaks torch's device meshes on a CUDA machine: a
    mesh then builds its sub-groups by splitting the bound group, and splitting deep-copies
    Gloo's options, which cannot be copied (`TypeError: cannot pickle '_Options'`, torch
    2.11 to 2.13, for every mesh with a dimension smaller than the world)."""
    for_cuda = [part.split(":", 1)[-1] for part in backend.lower().split(",")
                if ":" not in part or part.split(":", 1)[0] == "cuda"]  # "nccl", or "cpu:gloo,cuda:nccl"
    return device if device.type == "cuda" and for_cuda == ["nccl"] else None


def destroy_process_group(owned: bool) -> None:
    if owned and dist.is_initialized():
        dist.destroy_process_group()
