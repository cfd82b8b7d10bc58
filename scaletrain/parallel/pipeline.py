"""Pipeline parallel, applied first: the model is cut into `pp` stages of consecutive units
(stage_units), this process keeps its own, and the parallelisms that follow (tensor
parallel, checkpointing, compilation, FSDP) apply to that stage alone. Training runs each
batch as M micro-batches on a schedule of torch.distributed.pipelining (GPipe: all forwards,
then all backwards; 1F1B: one forward, one backward in the steady state, so fewer
activations wait) between the stages: the pipeline's group is this process and its peers
along the mesh's "pp" dimension (the same data-parallel and tensor-parallel coordinates).

Only the last stage has outputs, so the loss and the metrics come from there. A stage's
parameters keep the whole model's names, so stages' shares are disjoint pieces of one whole.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..data.batches import NO_TARGETS, split
from ..foundation.errors import UsageError, arg
from .config import ParallelConfig
from .dims import PP
from .part import ModelPart
from .splitting import describe_cut, parameter_counts, cut_blocks, split_model
from .topology import Topology

SCHEDULES = ("gpipe", "1f1b")


@functools.cache
def _without_outputs() -> dict:
    """Training never reads the last stage's outputs, only its losses; by default the schedule
    keeps every micro-batch's output and joins them at the end (two copies of the logits on a
    language model's last stage). torch 2.8 and later let a step not keep them. (Asked when a
    pipeline first steps: torch's pipelining imports its compiler, a second or so that a
    command reading its flags, or a run without a pipeline, need not spend.)"""
    import inspect

    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    accepted = inspect.signature(PipelineScheduleSingle.step).parameters
    return {"return_outputs": False} if "return_outputs" in accepted else {}


def _schedule_class(name: str):
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    return {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[name]


class PipelineStageModel(nn.Module):
    """What `run.setup` returns under pipeline: this process's stage. `module` is the stage
    (the model's units under their own names)."""

    def __init__(self, stage: nn.Module, stage_index: int, stages: int):
        super().__init__()
        self.module = stage
        self.stage_index, self.stages = stage_index, stages

    def forward(self, *args, **kwargs):
        raise RuntimeError("a pipeline stage is driven by run.train_step and run.evaluate, not called directly")


class PipelineCut:
    name = "pipeline"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.pipelined

    def apply(self, part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
        stage, stages = topology.stage, topology.stages
        cut = cut_blocks(part.module, stages, config.option("split_points"), "strategy pipeline", PP)
        parts = split_model(part.module, cut, "strategy pipeline")
        counts = parameter_counts(parts)
        if not counts[stage]:
            raise UsageError(f"pipeline stage {stage} ({', '.join(cut[stage])}) has no parameters; "
                             f"choose {arg('split_points')} so that every stage has some")
        mine = parts[stage]
        if not any(t.is_meta for t in mine.parameters()):  # a meta-device build is materialised later
            mine.to(topology.ctx.device)
        microbatches = config.microbatches
        schedule = config.option("schedule", "1f1b")
        part.module = part.model = mine
        part.runner = PipelineRunner(part, topology, schedule, microbatches)
        part.returned = PipelineStageModel(mine, stage, stages)
        replicas = topology.dp_size
        part.facts.update({"stages": cut, "stage_parameters": counts})
        part.banner.append(f"pipeline: {stages} stage(s) × {replicas} replica(s), {schedule} schedule, "
                           f"{microbatches} micro-batches; stages {describe_cut(cut, counts)}")


class PipelineRunner:
    """This process's stage, its schedules and its group."""

    def __init__(self, part: ModelPart, topology, schedule: str, microbatches: int):
        self.part, self.topology = part, topology
        self.schedule_name, self.n_micro = schedule, microbatches
        self.schedules: dict[tuple[bool, int], object] = {}
        self._loss_fn, self._scale = None, 1.0

    @property
    def first(self) -> bool:
        return self.topology.stage == 0

    @property
    def last(self) -> bool:
        return self.topology.stage == self.topology.stages - 1

    def _loss(self, outputs, targets):
        return self._loss_fn(outputs, targets) * (self._scale / self.n_micro)

    @staticmethod
    def _tensors(batch, targets) -> tuple[torch.Tensor, Any]:
        inputs, rest = split(batch, targets)
        if not isinstance(inputs, torch.Tensor) or len(rest) != 1:
            raise UsageError("a pipeline passes one tensor from stage to stage: give (inputs, targets) batches of "
                             "tensors (or a lone tensor of inputs); for mapping batches use strategy ddp or fsdp")
        return inputs, rest[0]

    def forward_backward(self, batch, targets=NO_TARGETS, loss_fn=None, scale=1.0, autocast=None):
        inputs, targets = self._tensors(batch, targets)
        self._loss_fn, self._scale = loss_fn or F.cross_entropy, scale
        losses: list[torch.Tensor] = []
        if len(inputs) % self.n_micro:
            raise UsageError(f"{arg('microbatches', self.n_micro)} does not divide this batch of {len(inputs)}; "
                             f"give batches whose size is a multiple of {self.n_micro}")
        schedule = self.schedule(True, len(inputs))
        with autocast():
            # The first stage feeds the inputs, the last compares with the targets; the
            # others receive activations and gradients from their neighbours.
            schedule.step(*([inputs] if self.first else []), target=targets if self.last else None,
                          losses=losses if self.last else None, **_without_outputs())
        if not self.last:
            return torch.zeros((), device=self.topology.ctx.device)
        return (torch.stack([l.detach() for l in losses]).sum() / scale).float()

    def predict(self, inputs, autocast=None) -> Optional[Any]:
        if not isinstance(inputs, torch.Tensor):
            self._tensors(inputs, None)  # raises the one-line refusal
        n = len(inputs)
        pad = (-n) % self.n_micro  # the schedule needs M equal micro-batches: repeat rows, drop after
        if pad:
            inputs = torch.cat([inputs, inputs[torch.arange(pad, device=inputs.device) % n]])
        with autocast():
            out = self.schedule(False, len(inputs)).eval(*([inputs] if self.first else []))
        return out[:n] if self.last else None

    def schedule(self, training: bool, batch: int):
        """The schedule for a batch size: a stage fixes its activation shapes at its first
        step, so each batch size (the last evaluation batch is usually smaller) gets its own."""
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        key = (training, batch)
        if key not in self.schedules:
            topology = self.topology
            stage = PipelineStage(self.part.model, topology.stage, topology.stages, topology.ctx.device,
                                  group=topology.group(PP))
            if training:
                # scale_grads=False: the loss function divides by M itself, because the schedule's
                # own scaling would also divide gradients accumulated over earlier steps.
                self.schedules[key] = _schedule_class(self.schedule_name)(
                    stage, n_microbatches=self.n_micro, loss_fn=self._loss, scale_grads=False)
            else:
                self.schedules[key] = ScheduleGPipe(stage, n_microbatches=self.n_micro)
        return self.schedules[key]
