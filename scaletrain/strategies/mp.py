"""`mp`: single-machine model parallel. The model is cut into K consecutive parts, part k
on device k (cuda:0..K-1), and activations move from one device to the next.

With `microbatches` M > 1 each batch is cut into M micro-batches that flow through the parts
like an assembly line (the classic "split size" trick): while part 2 works on micro-batch 1,
part 1 already works on micro-batch 2, so on GPUs the devices overlap instead of waiting.

On a machine without GPUs every part lives on the CPU, but the split, the transfers and the
micro-batch schedule run all the same (so the code path is the one a GPU machine runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..errors import UsageError, arg
from ..options import check_count, option
from ..values import name_list, positive_int
from .base import CommonOptions, Prepared, Strategy
from .splitting import describe_plan, parameter_counts, parse_split_points, plan_split, split_model

DEFAULT_CPU_PARTS = 2

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


class PartedModel(nn.Module):
    """The user's model with its blocks spread over devices; `module` is the model itself
    (so names, state_dict and `run.unwrap` are unchanged), the parts share its blocks."""

    def __init__(self, model: nn.Module, parts: list[nn.Sequential], devices: list[torch.device],
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


class MPPrepared(Prepared):
    def predict(self, inputs):
        with self.autocast():
            return self.parted.forward(inputs).to(self.ctx.device)

    def describe(self):
        return {**super().describe(), "devices_per_process": len(self.plan), "part_devices": self.device_names,
                "parts": self.plan, "part_parameters": self.part_params}


class ModelParallelStrategy(Strategy):
    name = "mp"
    help = "model parallel on one machine: consecutive parts of the model on K devices, micro-batches"
    Options = MPOptions
    Prepared = MPPrepared
    multi_process = False

    def part_count(self, local_processes: int = 1) -> Optional[int]:
        """devices_per_process, else (with no split points) the GPUs this process may use, or 2 on a CPU."""
        wanted = self.options.devices_per_process
        if wanted is not None or self.options.split_points:
            return wanted
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return max(1, gpus // local_processes) if gpus else DEFAULT_CPU_PARTS

    def device_slot(self, local_rank, local_world_size):
        # Process p owns cuda:p*K..p*K+K-1; its device is the first of them.
        return local_rank * (self.part_count(local_world_size) or len(self.options.split_points or ()) + 1)

    def check_plan(self, world_size, model, batch_size):
        if model is not None:
            plan_split(model, self.part_count(world_size), self.options.split_points, f"strategy {self.name}",
                       "devices_per_process")
        m = self.options.microbatches
        if batch_size is not None and m > batch_size:
            raise UsageError(f"{arg('microbatches', m)} is more than the batch of {batch_size}; use "
                             f"{arg('microbatches', batch_size)} or fewer, or a larger {arg('batch_size')}")

    def parted(self, ctx, model: nn.Module) -> tuple[PartedModel, list, list]:
        plan = plan_split(model, self.part_count(ctx.local_world_size), self.options.split_points,
                          f"strategy {self.name}", "devices_per_process")
        parts = split_model(model, plan)
        devices = part_devices(len(parts), ctx.device.index or 0, ctx.device)
        return PartedModel(model, parts, devices, self.options.microbatches), plan, parameter_counts(parts)

    def wrap(self, ctx, parted: PartedModel) -> nn.Module:
        """What setup hands back around the parted model (hybrid adds DDP)."""
        return parted

    def setup(self, ctx, model, optimizer):
        parted, plan, params = self.parted(ctx, model)
        prepared = self.Prepared(self, ctx, self.wrap(ctx, parted), optimizer, module=model)
        prepared.parted, prepared.plan, prepared.part_params = parted, plan, params
        prepared.device_names = [str(d) for d in parted.devices]
        prepared.banner = (f"scaletrain: {self.name}: {len(parted.parts)} part(s) on {', '.join(prepared.device_names)}, "
                           f"{self.options.microbatches} micro-batch(es); parts {describe_plan(plan, params)}")
        return prepared

    def describe(self, ctx):
        return {**super().describe(ctx), "microbatches": self.options.microbatches}
