"""`dp`: torch.nn.DataParallel — one process, a replica of the model on each of its devices,
each batch scattered across them and the gradients summed back on the first. On a machine
without GPUs there is exactly one device, the CPU, and the output says so (see
parallel/local_devices.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..foundation.options import option
from ..foundation.text_values import positive_int
from ..parallel.config import REPLICATE
from ..parallel.local_devices import replicas_here, visible_gpus
from .base import CommonOptions, Strategy


@dataclass(frozen=True)
class DPOptions(CommonOptions):
    devices_per_process: Optional[int] = option(None, "devices to replicate over (default: every visible GPU)",
                                                metavar="K", parse=positive_int)


class DataParallelStrategy(Strategy):
    name = "dp"
    help = "torch.nn.DataParallel: one process, a replica per device of this machine"
    Options = DPOptions
    multi_process = False
    fill = None
    local_devices = REPLICATE

    def check_model(self, world_size, model, batch_size):
        super().check_model(world_size, model, batch_size)
        replicas_here(self.options.devices_per_process, visible_gpus() > 0)
