"""`dp`: torch.nn.DataParallel — one process, a replica of the model on each of its devices,
each batch scattered across them and the gradients summed back on the first.

On a machine without GPUs there is exactly one device, the CPU: DataParallel then runs the
model once, with no replicas. scaletrain says so instead of pretending otherwise."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import UsageError
from .base import Strategy


def visible_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class DataParallelStrategy(Strategy):
    name = "dp"
    help = "torch.nn.DataParallel: one process, a replica per device of this machine"
    multi_process = False
    option_flags = {"devices_per_process": "--devices-per-process"}

    def device_count(self, on_cuda: bool) -> int:
        wanted = self.options.get("devices_per_process")
        available = visible_gpus() if on_cuda else 1
        if wanted is not None and wanted > available:
            where = f"{available} visible GPU(s)" if on_cuda else "one device (the CPU) and no GPU"
            raise UsageError(f"--devices-per-process {wanted}: this machine has {where}; "
                             f"use --devices-per-process {available}")
        return wanted or available

    def check_plan(self, world_size, model, batch_size):
        self.device_count(visible_gpus() > 0)

    def setup(self, run, model, optimizer):
        on_cuda = run.device.type == "cuda"
        count = self.device_count(on_cuda)
        model.to(run.device)
        if on_cuda:
            self.devices = [f"cuda:{i}" for i in range(count)]
            wrapped = nn.DataParallel(model, device_ids=list(range(count)), output_device=run.device.index)
        else:
            self.devices = ["cpu"]
            wrapped = nn.DataParallel(model)  # no GPU: forward runs the module itself
            run.print("scaletrain: dp on a machine without GPUs: one device (the CPU), so DataParallel "
                      "runs one replica; the numbers are those of one process")
        return self.remember(wrapped, optimizer)

    def describe(self, run):
        facts = {**super().describe(run), "devices_per_process": len(self.devices), "devices": self.devices,
                 "replicas": len(self.devices)}
        if self.devices == ["cpu"]:
            facts["note"] = "no GPU: DataParallel ran one replica on the CPU, like one process"
        return facts
