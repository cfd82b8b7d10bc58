"""A configuration of the parallelisms, as one frozen value: what a strategy preset fills in
for a number of processes, what `parallelize` applies, and what the planner predicts.

It is pure (no process, no model, no torch): the mesh's degrees, how the data-parallel
dimensions synchronise, whether the model runs as pipeline stages and on how many
micro-batches, how one process drives several devices, and the strategy's options (from
which each parallelism reads its own: the schedule, activation checkpointing, resharding...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .dims import ParallelDims

#: How the data-parallel dimensions synchronise (`ParallelConfig.data_parallel`).
DDP = "ddp"
"""DistributedDataParallel over the replicas: every process holds the whole (stage of the) model."""
FSDP = "fsdp"
"""FSDP2 over the replicas and shards: sharded, hybrid-sharded (HSDP) or replicated by FSDP's means."""

#: How one process drives several devices itself (`ParallelConfig.local_devices`).
SPLIT = "split"
"""The model cut into consecutive parts, one per device (mp; each replica of DDP + model parallel)."""
REPLICATE = "replicate"
"""torch.nn.DataParallel's replicas, one per device (dp)."""


@dataclass(frozen=True)
class ParallelConfig:
    """A combination of parallelisms on `dims.world_size` processes."""
    strategy: str
    """The preset it came from (for messages and labels: nothing switches on it)."""
    options: Any
    """The strategy's options (a frozen dataclass): each parallelism reads its own fields."""
    dims: ParallelDims
    data_parallel: Optional[str] = None
    """DDP, FSDP or None (nothing to synchronise)."""
    pipelined: bool = False
    """Whether the model runs as pipeline stages on a schedule (even with one stage)."""
    local_devices: Optional[str] = None
    """SPLIT, REPLICATE or None: how one process drives several devices itself."""
    microbatches: int = 1
    """Micro-batches a batch is cut into (a pipeline's schedule; mp's parts)."""

    def option(self, name: str, default: Any = None) -> Any:
        value = getattr(self.options, name, default)
        return default if value is None else value

    @property
    def world_size(self) -> int:
        return self.dims.world_size

    @property
    def label(self) -> str:
        """'fsdp ×4', or 'fsdp ×4 (dp_shard 2 × tp 2)' when the strategy composes dimensions."""
        return f"{self.strategy} ×{self.world_size}" + (f" ({self.dims.describe()})" if self.dims.composed else "")
