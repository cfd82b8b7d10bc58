"""`ddp`: DistributedDataParallel — one process per device, gradients all-reduced in buckets
while backward is still running, so communication overlaps computation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..foundation.errors import arg
from ..foundation.options import check_choice, check_count, option
from ..foundation.text_values import positive_float, positive_int
from ..parallel.config import DDP
from ..parallel.ddp_compression import COMPRESSIONS
from ..parallel.dims import DP_REPLICATE, DP_SHARD, PP, TP
from .base import CommonOptions, Strategy


@dataclass(frozen=True)
class DDPOptions(CommonOptions):
    grad_compression: str = option(
        "none", "send gradients in fewer bytes: bf16 or fp16 (half the bytes), powersgd (low rank); for "
                "communication-bound models; none: exact fp32", choices=COMPRESSIONS)
    bucket_cap_mb: Optional[float] = option(None, "size of DDP's gradient buckets in MB (torch's 25 when left out)",
                                            metavar="MB", parse=positive_float)
    static_graph: bool = option(
        False, "every step uses the same parameters in the same order (DDP then plans its buckets once); off by default because torch's "
               "DDP then fails in no_sync() before the first synchronised step, which accumulation does")
    powersgd_rank: int = option(2, "the rank of PowerSGD's low-rank approximation", parse=positive_int,
                                metavar="R")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("grad_compression", self.grad_compression, COMPRESSIONS)
        check_count("powersgd_rank", self.powersgd_rank)


class DDPStrategy(Strategy):
    name = "ddp"
    help = "DistributedDataParallel: one process per device, gradients all-reduced"
    Options = DDPOptions
    data_parallel_kind = DDP
    instead = {TP: f"{arg('strategy', 'tp')} (tensor parallel; the other processes replicate it) or "
                   f"{arg('strategy', 'fsdp')} with {arg('tp')}",
               DP_SHARD: f"{arg('strategy', 'fsdp')} (with {arg('dp_replicate')} for hybrid sharding, HSDP)",
               DP_REPLICATE: f"{arg('strategy', 'fsdp')} with {arg('dp_shard')} for hybrid sharding, HSDP (ddp "
                             f"replicates over every process)",
               PP: f"{arg('strategy', 'pipeline')}"}

    def describe(self, topology):
        return {**super().describe(topology), "grad_compression": self.options.grad_compression,
                "static_graph": self.options.static_graph, "bucket_cap_mb": self.options.bucket_cap_mb}
