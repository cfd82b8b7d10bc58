"""`mp`: single-machine model parallel. The model is cut into K consecutive parts, part k
on device k (cuda:0..K-1), and activations move from one device to the next.

With `microbatches` M > 1 each batch is cut into M micro-batches that flow through the parts
like an assembly line (the classic "split size" trick): while part 2 works on micro-batch 1,
part 1 already works on micro-batch 2, so on GPUs the devices overlap instead of waiting.

On a machine without GPUs every part lives on the CPU, but the split, the transfers and the
micro-batch schedule run all the same (so the code path is the one a GPU machine runs).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..errors import UsageError
from .base import Strategy
from .splitting import describe_plan, parameter_counts, parse_split_points, plan_split, split_model

DEFAULT_CPU_PARTS = 2


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

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
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
        raise UsageError(f"--devices-per-process {count}: this process would need cuda:{first_index}.."
                         f"cuda:{first_index + count - 1}, but {visible} GPU(s) are visible; "
                         f"use --devices-per-process {max(1, visible - first_index)} or fewer processes")
    return [torch.device("cuda", first_index + i) for i in range(count)]


class ModelParallelStrategy(Strategy):
    name = "mp"
    help = "model parallel on one machine: consecutive parts of the model on K devices, micro-batches"
    multi_process = False
    option_flags = {"devices_per_process": "--devices-per-process", "microbatches": "--microbatches",
                    "split_points": "--split-points"}

    def __init__(self, **options):
        super().__init__(**options)
        self.split_points = parse_split_points(self.options.get("split_points"))
        self.microbatches = self.options.get("microbatches", 1)

    def part_count(self, local_processes: int = 1) -> Optional[int]:
        """--devices-per-process, else (with no split points) the GPUs this process may use, or 2 on a CPU."""
        wanted = self.options.get("devices_per_process")
        if wanted is not None or self.split_points:
            return wanted
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return max(1, gpus // local_processes) if gpus else DEFAULT_CPU_PARTS

    def device_slot(self, local_rank, local_world_size):
        # Process p owns cuda:p*K..p*K+K-1; its run.device is the first of them.
        return local_rank * (self.part_count(local_world_size) or len(self.split_points or ()) + 1)

    def check_plan(self, world_size, model, batch_size):
        if model is not None:
            plan_split(model, self.part_count(world_size), self.split_points, f"--strategy {self.name}",
                       "--devices-per-process")
        if batch_size is not None and self.microbatches > batch_size:
            raise UsageError(f"--microbatches {self.microbatches} is more than the batch of {batch_size}; "
                             f"use --microbatches {batch_size} or fewer, or a larger --batch-size")

    def parted(self, run, model: nn.Module) -> PartedModel:
        plan = plan_split(model, self.part_count(run.local_world_size), self.split_points,
                          f"--strategy {self.name}", "--devices-per-process")
        parts = split_model(model, plan)
        devices = part_devices(len(parts), run.device.index or 0, run.device)
        self.plan, self.part_params = plan, parameter_counts(parts)
        self.device_names = [str(d) for d in devices]
        run.print(f"scaletrain: {self.name}: {len(parts)} part(s) on {', '.join(self.device_names)}, "
                  f"{self.microbatches} micro-batch(es); parts {describe_plan(plan, self.part_params)}")
        return PartedModel(model, parts, devices, self.microbatches)

    def setup(self, run, model, optimizer):
        return self.remember(self.parted(run, model), optimizer)

    def predict(self, run, model, inputs):
        with self.autocast(run.device):
            return self.parted_of(model)(inputs).to(run.device)

    def parted_of(self, model: nn.Module) -> PartedModel:
        return model

    def unwrap(self, model):
        return self.parted_of(model).module

    def describe(self, run):
        return {**super().describe(run), "devices_per_process": len(self.plan), "part_devices": self.device_names,
                "parts": self.plan, "part_parameters": self.part_params, "microbatches": self.microbatches}
