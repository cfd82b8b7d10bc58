"""`mp`: single-machine model parallel. The model is cut into K consecutive parts, part k on
device k (cuda:0..K-1), and activations move from one device to the next; with M
micro-batches the parts overlap like an assembly line. See parallel/local_devices.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..foundation.errors import UsageError, arg
from ..foundation.options import check_count, option
from ..foundation.text_values import name_list, positive_int
from ..parallel.config import SPLIT
from ..parallel.local_devices import split_parts
from ..parallel.splitting import parse_split_points, cut_blocks
from .base import CommonOptions, Strategy

SPLIT_POINTS_HELP = "blocks at which a new part starts (e.g. conv2,fc1) instead of the automatic split that " \
                    "balances parameters"


@dataclass(frozen=True)
class MPOptions(CommonOptions):
    devices_per_process: Optional[int] = option(
        None, "parts to split the model into, one per device (cuda:0..K-1; all on the CPU when there is no GPU). "
              "Default: the GPUs each process may use, 2 parts on a CPU", metavar="K", parse=positive_int)
    microbatches: int = option(1, "micro-batches each batch is cut into so that parts overlap", metavar="M",
                               parse=positive_int)
    split_points: Optional[tuple] = option(None, SPLIT_POINTS_HELP, metavar="BLOCK,BLOCK", parse=name_list)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("microbatches", self.microbatches)
        object.__setattr__(self, "split_points", parse_split_points(self.split_points))


class ModelParallelStrategy(Strategy):
    name = "mp"
    help = "model parallel on one machine: consecutive parts of the model on K devices, micro-batches"
    Options = MPOptions
    multi_process = False
    fill = None
    local_devices = SPLIT

    def part_count(self, local_processes: int = 1) -> Optional[int]:
        return split_parts(self.options.devices_per_process, self.options.split_points, local_processes)

    def devices_per_process(self, local_world_size=1):
        # Process p owns cuda:p*K..p*K+K-1; its device is the first of them.
        return self.part_count(local_world_size) or len(self.options.split_points or ()) + 1

    def check_model(self, world_size, model, batch_size):
        super().check_model(world_size, model, batch_size)
        if model is not None:
            cut_blocks(model, self.part_count(world_size), self.options.split_points, f"strategy {self.name}",
                       "devices_per_process")
        m = self.options.microbatches
        if batch_size is not None and m > batch_size:
            raise UsageError(f"{arg('microbatches', m)} is more than the batch of {batch_size}; use "
                             f"{arg('microbatches', batch_size)} or fewer, or a larger {arg('batch_size')}")

    def describe(self, topology):
        return {**super().describe(topology), "microbatches": self.options.microbatches}
