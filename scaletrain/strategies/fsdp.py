"""`fsdp`: fully sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`).

Each process keeps 1/S of every parameter, of its gradient and of the optimizer state (S:
dp_shard, by default every process the other degrees leave). Before a block's forward (and
backward) its full parameters are all-gathered, afterwards freed again; gradients are
reduce-scattered so each process gets the sum of its own shard. With `dp_replicate` R the
shards form R replica groups (hybrid sharding, HSDP); with `tp` each layer is also split by
tensor parallel (2-D: FSDP × TP).

With one shard and no replica (one process, or tensor parallel alone) there is nothing to
shard: the model trains as it is, with autocast and fp32 parameters, as one GPU trains
fastest (`one_shard="plain"`, the default; FSDP would cast and copy every block's parameters
in every forward, and again in a recomputing backward). Its checkpoints are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..foundation.errors import arg
from ..foundation.options import check_choice, option
from ..parallel.config import FSDP
from ..parallel.dims import DP_SHARD, PP
from .base import MeshOptions, Strategy


ONE_SHARD = ("plain", "fsdp")


@dataclass(frozen=True)
class FSDPOptions(MeshOptions):
    one_shard: str = option(
        "plain", "with one shard and no replica (one process, or tp alone): plain trains the model as it is "
                 "(autocast, fp32 parameters, the same checkpoints), fsdp wraps it in FSDP2 all the same (its "
                 "policy casts and copies every block's parameters each forward)", choices=ONE_SHARD)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("one_shard", self.one_shard, ONE_SHARD)


class FSDPStrategy(Strategy):
    name = "fsdp"
    help = "fully sharded data parallel (FSDP2): parameters, gradients and optimizer state split N ways"
    Options = FSDPOptions
    fill = DP_SHARD
    data_parallel_kind = FSDP
    instead = {PP: f"{arg('strategy', 'pipeline')} with {arg('dp_shard')} (pipeline × FSDP)"}

    def data_parallel(self, dims):
        """FSDP, except where there is nothing to shard or replicate (see the module's text)."""
        alone = dims.dp_size == 1 and dims.shards == 1
        if alone and self.options.one_shard == "plain" and not self.options.offload:
            return None
        return FSDP

    def setup(self, topology, model, optimizer, meta_rng=None, init_fn=None):
        prepared = super().setup(topology, model, optimizer, meta_rng, init_fn)
        if self.data_parallel(topology.dims) is None:
            prepared.banner.append("fsdp: one shard and no replica, so the model trains as it is (autocast, fp32 "
                                   "parameters; one_shard fsdp wraps it in FSDP all the same)")
        return prepared

    def describe(self, topology):
        return {**super().describe(topology), "shards": topology.dims.shards}
