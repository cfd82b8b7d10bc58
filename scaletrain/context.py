"""What a strategy may know about the process it runs in: a small frozen value.

Strategies and checkpoints take this, never the library's `Run`: they sit below the API
and must not depend on it (and a frozen value cannot be changed behind their back).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .environment import DistEnv


@dataclass(frozen=True)
class ProcessContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    nnodes: int = 1
    device: torch.device = torch.device("cpu")
    backend: str = "gloo"
    threads: int = 1

    @classmethod
    def of(cls, env: DistEnv, device: torch.device, backend: str, threads: int) -> "ProcessContext":
        return cls(env.rank, env.world_size, env.local_rank, env.local_world_size, env.node_rank, env.nnodes,
                   device, backend, threads)

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
