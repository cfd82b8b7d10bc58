"""The devices one process drives itself (the classic single-machine strategies):

- "split" (mp, and each replica of DDP + model parallel, `hybrid`): the model cut into K consecutive parts, part k
  on device k (cuda:p*K+k for process p), activations moved from one device to the next.
  With M micro-batches each batch flows through the parts like an assembly line (the
  classic "split size" trick): while part 2 works on micro-batch 1, part 1 already works on
  micro-batch 2, so on GPUs the devices overlap instead of waiting. On a machine without
  GPUs every part lives on the CPU, but the split, the transfers and the micro-batch
  schedule run all the same (the code path a GPU machine runs).
- "replicate" (dp): torch.nn.DataParallel — a replica on each device, each batch scattered
  across them and the gradients summed back on the first. On a CPU there is one device, and
  DataParallel runs the model once: the output says so instead of pretending otherwise.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..foundation.errors import UsageError, arg
from .config import SPLIT, ParallelConfig
from .part import ModelPart
from .splitting import describe_cut, parameter_counts, cut_blocks, split_model
from .topology import Topology

#: Parts an mp model is cut into on a machine without GPUs.
DEFAULT_CPU_PARTS = 2


def visible_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class PartedModel(nn.Module):
    """The user's model with its blocks spread over devices; `module` is the model itself
    (so names, state_dict and `run.unwrap` are unchanged), the parts share its blocks."""

    def __init__(self, model: nn.Module, parts: list[nn.Module], devices: list[torch.device],
                 microbatches: int = 1):
        super().__init__()
        self.module = model
        self.devices = devices
        self.microbatches = microbatches
        for part, device in zip(parts, devices):
            part.to(device)
        self.__dict__["parts"] = parts  # not registered: the blocks are already under `module`

    def forward(self, inputs: Optional[torch.Tensor] = None, **keywords) -> torch.Tensor:
        if keywords or not isinstance(inputs, torch.Tensor):
            given = "keyword arguments (a dict batch)" if keywords else f"a {type(inputs).__name__}"
            raise UsageError(f"a model split into parts takes one tensor of inputs, not {given}; "
                             "give (inputs, targets) batches, or use strategy ddp or fsdp for other batches")
        chunks = inputs.tensor_split(min(self.microbatches, len(inputs))) if self.microbatches > 1 else [inputs]
        acts: list[Optional[torch.Tensor]] = list(chunks)
        parts, k_parts = self.parts, len(self.parts)
        # Clock tick t: part k works on micro-batch t-k. Later parts go first within a tick so
        # that, on GPUs, their kernels are queued before part 0 starts the next micro-batch.
        for tick in range(len(chunks) + k_parts - 1):
            for k in reversed(range(k_parts)):
                i = tick - k
                if 0 <= i < len(chunks):
                    acts[i] = parts[k](acts[i].to(self.devices[k], non_blocking=True))
        return acts[0] if len(acts) == 1 else torch.cat(acts, dim=0)


def part_devices(count: int, first_index: int, device: torch.device) -> list[torch.device]:
    """cuda:first..first+count-1 on GPUs; on a CPU every part gets the CPU."""
    if device.type != "cuda":
        return [torch.device("cpu")] * count
    visible = torch.cuda.device_count()
    if first_index + count > visible:
        raise UsageError(f"{arg('devices_per_process', count)}: this process would need cuda:{first_index}.."
                         f"cuda:{first_index + count - 1}, but {visible} GPU(s) are visible; use "
                         f"{arg('devices_per_process', max(1, visible - first_index))} or fewer processes")
    return [torch.device("cuda", first_index + i) for i in range(count)]


def split_parts(devices_per_process: Optional[int], split_points, local_processes: int = 1) -> Optional[int]:
    """devices_per_process, else (with no split points) the GPUs this process may use, or 2 on a CPU."""
    if devices_per_process is not None or split_points:
        return devices_per_process
    gpus = visible_gpus()
    return max(1, gpus // local_processes) if gpus else DEFAULT_CPU_PARTS


def replicas_here(devices_per_process: Optional[int], on_cuda: bool) -> int:
    """The devices DataParallel replicates over: those asked for, at most those visible."""
    available = visible_gpus() if on_cuda else 1
    if devices_per_process is not None and devices_per_process > available:
        where = f"{available} visible GPU(s)" if on_cuda else "one device (the CPU) and no GPU"
        raise UsageError(f"{arg('devices_per_process', devices_per_process)}: this machine has {where}; "
                         f"use {arg('devices_per_process', available)}")
    return devices_per_process or available


class LocalDevices:
    name = "local_devices"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.local_devices is not None

    def apply(self, part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
        if config.local_devices == SPLIT:
            _split(part, config, topology.ctx)
        else:
            _replicate(part, config, topology.ctx)


def _split(part: ModelPart, config: ParallelConfig, ctx) -> None:
    count = split_parts(config.option("devices_per_process"), config.option("split_points"), ctx.local_world_size)
    what = f"strategy {config.strategy}"
    cut = cut_blocks(part.module, count, config.option("split_points"), what, "devices_per_process")
    parts = split_model(part.module, cut, what)
    devices = part_devices(len(parts), ctx.device.index or 0, ctx.device)
    microbatches = config.option("microbatches", 1)
    parted = PartedModel(part.module, parts, devices, microbatches)
    counts = parameter_counts(parts)
    names = [str(d) for d in devices]
    part.model = parted
    part.runner = PartedRunner(parted, ctx.device)
    part.facts.update({"devices_per_process": len(cut), "part_devices": names, "parts": cut,
                       "part_parameters": counts})
    part.banner.append(f"{config.strategy}: {len(parts)} part(s) on {', '.join(names)}, {microbatches} micro-batch(es); "
                       f"parts {describe_cut(cut, counts)}")


class PartedRunner:
    """Evaluation of a parted model: its output, on the process's own device."""

    def __init__(self, parted: PartedModel, device: torch.device):
        self.parted, self.device = parted, device

    forward_backward = None  # training calls the parted model like any model

    def predict(self, inputs, autocast=None):
        with autocast():
            return self.parted.forward(inputs).to(self.device)


def _replicate(part: ModelPart, config: ParallelConfig, ctx) -> None:
    on_cuda = ctx.device.type == "cuda"
    count = replicas_here(config.option("devices_per_process"), on_cuda)
    part.module.to(ctx.device)
    if on_cuda:
        devices = [f"cuda:{i}" for i in range(count)]
        part.model = nn.DataParallel(part.module, device_ids=list(range(count)), output_device=ctx.device.index)
    else:
        devices = ["cpu"]
        part.model = nn.DataParallel(part.module)  # no GPU: forward runs the module itself
        part.banner.append("dp on a machine without GPUs: one device (the CPU), so DataParallel runs one replica; "
                           "the numbers are those of one process")
        part.facts["note"] = "no GPU: DataParallel ran one replica on the CPU, like one process"
    part.facts.update({"devices_per_process": len(devices), "devices": devices, "replicas": len(devices)})
