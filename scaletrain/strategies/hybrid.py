"""`hybrid`: DistributedDataParallel whose every replica is itself split across its process's
devices like `mp` (process p owns cuda:p*K..p*K+K-1): the local-devices split, then DDP over
the data-parallel replicas, which all-reduces the gradients of the whole split replica."""

from __future__ import annotations

from .mp import ModelParallelStrategy


class HybridStrategy(ModelParallelStrategy):
    name = "hybrid"
    help = "DDP + model parallel: each process splits its replica across K devices"
    multi_process = True
    fill = "dp_replicate"
    data_parallel_kind = "ddp"
