"""`tp`: tensor parallel — each layer's matrices split across processes (attention heads,
MLP hidden units), through torch.distributed.tensor.parallel. With `tp` N given, the
processes it leaves hold replicas (or, with dp_shard, shards: FSDP × TP), synchronised
through FSDP2 over the data-parallel dimensions; without it, every process is one of the
tensor-parallel group."""

from __future__ import annotations

from dataclasses import dataclass

from ..foundation.errors import arg
from ..parallel.config import FSDP
from ..parallel.dims import DP_REPLICATE, PP, TP
from .base import MeshOptions, Strategy


@dataclass(frozen=True)
class TPOptions(MeshOptions):
    pass


class TensorParallelStrategy(Strategy):
    name = "tp"
    help = "tensor parallel: each layer's matrices split across processes"
    Options = TPOptions
    instead = {PP: f"{arg('strategy', 'pipeline')} with {arg('tp')} (pipeline × tensor parallel)"}

    def fill_for(self, given):
        if given[TP] is None:
            return TP
        return DP_REPLICATE if given[DP_REPLICATE] is None else None

    def data_parallel(self, dims):
        return FSDP if dims.dp_size > 1 or dims.shards > 1 else None  # context-parallel peers share weights too
