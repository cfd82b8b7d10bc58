"""`fsdp`: fully sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`).

Each process keeps 1/S of every parameter, of its gradient and of the optimizer state (S:
dp_shard, by default every process the other degrees leave). Before a block's forward (and
backward) its full parameters are all-gathered, afterwards freed again; gradients are
reduce-scattered so each process gets the sum of its own shard. With `dp_replicate` R the
shards form R replica groups (hybrid sharding, HSDP); with `tp` each layer is also split by
tensor parallel (2-D: FSDP × TP).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..foundation.errors import arg
from ..parallel.config import FSDP
from ..parallel.dims import DP_SHARD, PP
from .base import MeshOptions, Strategy


@dataclass(frozen=True)
class FSDPOptions(MeshOptions):
    pass


class FSDPStrategy(Strategy):
    name = "fsdp"
    help = "fully sharded data parallel (FSDP2): parameters, gradients and optimizer state split N ways"
    Options = FSDPOptions
    fill = DP_SHARD
    data_parallel_kind = FSDP
    instead = {PP: f"{arg('strategy', 'pipeline')} with {arg('dp_shard')} (pipeline × FSDP)"}

    def describe(self, topology):
        return {**super().describe(topology), "shards": topology.dims.shards}
