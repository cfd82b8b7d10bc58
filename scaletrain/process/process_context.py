"""What a strategy may know about the process it runs in: a small frozen value.

Strategies and checkpoints take this, never the library's `Run`: they sit below the API
and must not depend on it (and a frozen value cannot be changed behind their back).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .environment import DistEnv


@dataclass(frozen=True)
class ProcessContext:
    """Where this process stands (its DistEnv: ranks and sizes) and what it runs on."""

    env: DistEnv = field(default_factory=DistEnv)
    device: torch.device = torch.device("cpu")
    backend: str = "gloo"
    threads: int = 1

    rank = property(lambda self: self.env.rank)
    world_size = property(lambda self: self.env.world_size)
    local_rank = property(lambda self: self.env.local_rank)
    local_world_size = property(lambda self: self.env.local_world_size)
    node_rank = property(lambda self: self.env.node_rank)
    nnodes = property(lambda self: self.env.nnodes)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether collectives have peers to talk to (a process group of more than one)."""
        return dist.is_initialized() and dist.get_world_size() > 1

    @property
    def gather_device(self) -> torch.device:
        """Where small tensors must be for a collective: NCCL moves device tensors only."""
        return self.device if self.backend == "nccl" else torch.device("cpu")
