"""`auto` in the library (`scaletrain.init(strategy="auto")`): data parallel over every process,
DDP where the model's training state fits a process's memory, FSDP (sharded over every
process) where it does not — decided at `run.setup`, once the model is known. Either way each
process reads its own shard of the data, so loaders made before setup are the right ones.

The command line's `scaletrain train --strategy auto` chooses among every strategy and
composition from measurements (scaletrain/plan/choose.py) instead; see docs/strategies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..parallel.config import DDP, FSDP
from ..parallel.dims import DP_REPLICATE, DP_SHARD, ParallelDims, resolve_dims
from .base import CommonOptions, Strategy

#: Bytes of training state per fp32 parameter with Adam: the parameter, its gradient, two moments.
STATE_BYTES_PER_PARAMETER = 16
#: Of a process's memory, the share the training state may take (activations need the rest).
STATE_SHARE = 0.5


@dataclass(frozen=True)
class AutoOptions(CommonOptions):
    pass


def process_memory_bytes(device: torch.device, nproc_per_node: int) -> float:
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / max(1, nproc_per_node)


def data_parallel_for(state_bytes: float, room_bytes: float, world_size: int) -> str:
    """DDP where every process can hold the whole training state, FSDP where it cannot (and
    there are processes to share it)."""
    return DDP if state_bytes <= room_bytes or world_size == 1 else FSDP


class AutoStrategy(Strategy):
    name = "auto"
    help = "ddp where the training state fits a process, else fsdp (library); measured choice (train)"
    Options = AutoOptions
    data_parallel_kind = DDP
    measured_choice = True
    plannable = False
    chosen: Optional[str] = None

    def dims(self, world_size, local_world_size=1):
        return resolve_dims(world_size, {}, DP_SHARD if self.chosen == FSDP else DP_REPLICATE)

    def data_parallel(self, dims: ParallelDims):
        return self.chosen or DDP

    def setup(self, topology, model, optimizer, meta_rng=None, init_fn=None):
        states = STATE_BYTES_PER_PARAMETER * sum(p.numel() for p in model.parameters())
        room = STATE_SHARE * process_memory_bytes(topology.ctx.device, topology.ctx.local_world_size)
        self.chosen = data_parallel_for(states, room, topology.ctx.world_size)
        topology.reshape(self.dims(topology.ctx.world_size))
        prepared = super().setup(topology, model, optimizer, meta_rng, init_fn)
        prepared.banner.insert(0, f"auto: {self.chosen}: the training state ({states / 1e6:,.0f} MB with Adam) "
                                  f"{'fits' if self.chosen == DDP else 'does not fit'} half a process's memory "
                                  f"({room * 2 / 1e6:,.0f} MB)")
        return prepared
