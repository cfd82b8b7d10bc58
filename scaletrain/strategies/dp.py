"""`dp`: torch.nn.DataParallel — one process, a replica of the model on each of its devices,
each batch scattered across them and the gradients summed back on the first.

On a machine without GPUs there is exactly one device, the CPU: DataParallel then runs the
model once, with no replicas. scaletrain says so instead of pretending otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..errors import UsageError, arg
from ..options import option
from ..values import positive_int
from .base import CommonOptions, Prepared, Strategy


def visible_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass(frozen=True)
class DPOptions(CommonOptions):
    devices_per_process: Optional[int] = option(None, "devices to replicate over (default: every visible GPU)",
                                                metavar="K", parse=positive_int)


class DPPrepared(Prepared):
    def describe(self):
        facts = {**super().describe(), "devices_per_process": len(self.devices), "devices": self.devices,
                 "replicas": len(self.devices)}
        if self.devices == ["cpu"]:
            facts["note"] = "no GPU: DataParallel ran one replica on the CPU, like one process"
        return facts


class DataParallelStrategy(Strategy):
    name = "dp"
    help = "torch.nn.DataParallel: one process, a replica per device of this machine"
    Options = DPOptions
    multi_process = False

    def device_count(self, on_cuda: bool) -> int:
        wanted = self.options.devices_per_process
        available = visible_gpus() if on_cuda else 1
        if wanted is not None and wanted > available:
            where = f"{available} visible GPU(s)" if on_cuda else "one device (the CPU) and no GPU"
            raise UsageError(f"{arg('devices_per_process', wanted)}: this machine has {where}; "
                             f"use {arg('devices_per_process', available)}")
        return wanted or available

    def check_plan(self, world_size, model, batch_size):
        self.device_count(visible_gpus() > 0)

    def setup(self, ctx, model, optimizer):
        on_cuda = ctx.device.type == "cuda"
        count = self.device_count(on_cuda)
        model.to(ctx.device)
        if on_cuda:
            devices = [f"cuda:{i}" for i in range(count)]
            wrapped = nn.DataParallel(model, device_ids=list(range(count)), output_device=ctx.device.index)
        else:
            devices = ["cpu"]
            wrapped = nn.DataParallel(model)  # no GPU: forward runs the module itself
        prepared = DPPrepared(self, ctx, wrapped, optimizer, module=model)
        prepared.devices = devices
        if not on_cuda:
            prepared.banner = ("scaletrain: dp on a machine without GPUs: one device (the CPU), so DataParallel "
                               "runs one replica; the numbers are those of one process")
        return prepared
