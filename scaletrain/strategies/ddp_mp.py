"""`hybrid`: DDP + model parallel, the classic composition — DistributedDataParallel whose
every replica is itself split across its process's devices like `mp` (process p owns
cuda:p*K..p*K+K-1): the local-devices split, then DDP over the data-parallel replicas, which
all-reduces the gradients of the whole split replica.

Not to be confused with hybrid sharding (HSDP: FSDP's shards within groups, replicas across
them), which is `fsdp` with `dp_replicate`."""

from __future__ import annotations

from ..parallel.config import DDP
from ..parallel.dims import DP_REPLICATE
from .mp import ModelParallelStrategy


class DDPModelParallelStrategy(ModelParallelStrategy):
    name = "hybrid"
    help = "DDP + model parallel: each process splits its replica across K devices"
    multi_process = True
    fill = DP_REPLICATE
    data_parallel_kind = DDP
