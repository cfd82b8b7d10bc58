"""Setting up and tearing down torch.distributed's process group for one run."""

from __future__ import annotations

import os
from datetime import timedelta

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
    if device.type == "cuda":
        # Binding the group to the device lets NCCL connect eagerly and avoids the
        # "guessing device from rank" warning and its wrong guesses on multi-GPU nodes.
        kwargs["device_id"] = device
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


def destroy_process_group(owned: bool) -> None:
    if owned and dist.is_initialized():
        dist.destroy_process_group()
