"""Where predicted processes run: machines like this one, and the link between them.

A `Machine` is what the planner knows of the hardware: how many processes each machine runs
(one per GPU, or one per core on a CPU), its cores, how much of the computation can hide
communication, each device's memory, the devices a one-process strategy drives, and the
network link between machines (nominal; measured across `--hosts` instead where given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Machine:
    nproc_per_node: int
    """Processes on each machine."""
    cores: int
    """CPU cores of each machine (a CPU machine's processes share them)."""
    link_gbps: float
    """The network between machines, Gbit/s (for world sizes beyond one machine)."""
    link_latency_s: float
    """The network's latency between machines, seconds."""
    overlap: float
    """Share (0-1) of the computation during which communication can run: 1 on GPUs, whose copy
    engines communicate while they compute; 0 on CPUs, whose cores do both."""
    device_memory_bytes: float
    """Memory of one device (a GPU's, or a CPU machine's memory ÷ its processes)."""
    devices_per_process: Optional[int] = None
    """Devices a dp, mp or DDP + model parallel process drives (None: the GPUs visible, or the CPU's one)."""


def default_machine(device: Optional[str] = None, nproc_per_node: Optional[int] = None, link_gbps: float = 10.0,
                    link_latency_us: float = 20.0, overlap: Optional[float] = None,
                    device_memory_gb: Optional[float] = None, devices_per_process: Optional[int] = None) -> Machine:
    """This machine, for processes on `device` ("cpu", "cuda", "cuda:1"; None: CUDA when
    visible), with whatever the caller gives instead."""
    import torch

    from ..process.devices import choose_device
    from ..foundation.errors import UsageError, arg
    from .probe import cores_here, device_memory_bytes

    if overlap is not None and not 0 <= overlap <= 1:
        raise UsageError(f"{arg('overlap', overlap)}: must be between 0 and 1")
    device_type = choose_device(device, 0).type
    cores = cores_here()
    if nproc_per_node is None:
        nproc_per_node = torch.cuda.device_count() if device_type == "cuda" else cores
    if overlap is None:
        # On a CPU the collective's copies and reductions need the cores the computation is
        # using: nothing is hidden. A GPU computes while its copy engines and NCCL communicate.
        overlap = 1.0 if device_type == "cuda" else 0.0
    memory = device_memory_gb * 1e9 if device_memory_gb else device_memory_bytes(device_type, nproc_per_node)
    return Machine(nproc_per_node=nproc_per_node, cores=cores, link_gbps=link_gbps,
                   link_latency_s=link_latency_us * 1e-6, overlap=overlap, device_memory_bytes=memory,
                   devices_per_process=devices_per_process)
