"""`pipeline`: distributed model parallel with torch.distributed.pipelining. The model is cut
into S stages, one per process (possibly on different machines); each batch is cut into M
micro-batches that flow through the stages on a schedule (GPipe: all forwards, then all
backwards; 1F1B: one forward, one backward in the steady state, so fewer activations wait).

World size S × R gives R replicas of the pipeline. Rank r is stage r % S of replica r // S;
replica k reads data shard k, and the R copies of each stage all-reduce their gradients.
Only the last stage has outputs, so the loss and the accuracy come from there.

A stage's parameters keep the whole model's names (`fc1.1.weight`), so the stages' shares
of the model and of the optimizer state are disjoint pieces of one whole: a checkpoint
gathers them into the whole model, and loads back into any number of stages.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..batches import NO_TARGETS, split
from ..collectives import gather_to_rank0, scatter_from_rank0
from ..errors import UsageError, arg
from ..options import check_choice, check_count, option
from ..values import name_list, positive_int
from . import model_state
from .base import CommonOptions, Prepared, Strategy
from .mp import SPLIT_POINTS_HELP
from .splitting import describe_plan, parameter_counts, parse_split_points, plan_split, split_model

#: Schedule names and their classes in torch.distributed.pipelining, imported when a stage
#: first runs (the module takes over a second to import).
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}


@dataclass(frozen=True)
class PipelineOptions(CommonOptions):
    pipeline_stages: Optional[int] = option(
        None, "stages, one process each; the world size must be a multiple S×R, giving R data-parallel replicas of "
              "the pipeline (default: the world size)", metavar="S", parse=positive_int)
    schedule: str = option("1f1b", "gpipe (all forwards, then all backwards) or 1f1b (fewer activations kept)",
                           choices=tuple(SCHEDULES))
    microbatches: Optional[int] = option(
        None, "micro-batches each batch is cut into (default: the number of stages; must divide the batch size)",
        metavar="M", parse=positive_int)
    split_points: Optional[tuple] = option(None, SPLIT_POINTS_HELP, metavar="BLOCK,BLOCK", parse=name_list)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("schedule", self.schedule, SCHEDULES)
        for name in ("pipeline_stages", "microbatches"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name))
        object.__setattr__(self, "split_points", parse_split_points(self.split_points))


class PipelineStageModel(nn.Module):
    """What `run.setup` returns under pipeline: this process's stage. `module` is the stage
    (a Sequential of the model's blocks under their own names)."""

    def __init__(self, stage: nn.Sequential, stage_index: int, stages: int):
        super().__init__()
        self.module = stage
        self.stage_index, self.stages = stage_index, stages

    def forward(self, *args, **kwargs):
        raise RuntimeError("a pipeline stage is driven by run.train_step and run.evaluate, not called directly")


class PipelineStrategy(Strategy):
    name = "pipeline"
    help = "distributed model parallel: stages in separate processes, micro-batches on a GPipe/1F1B schedule"
    Options = PipelineOptions

    # -- the plan ---------------------------------------------------------------------------
    def stage_count(self, world_size: int) -> int:
        if self.options.split_points:
            return len(self.options.split_points) + 1
        return self.options.pipeline_stages or world_size

    def microbatches(self, world_size: int) -> int:
        return self.options.microbatches or self.stage_count(world_size)

    def check_world_size(self, world_size):
        stages = self.stage_count(world_size)
        given = self.options.pipeline_stages
        if given is not None and self.options.split_points and given != stages:
            raise UsageError(f"{arg('split_points')} makes {stages} stages but {arg('pipeline_stages', given)}; "
                             f"give {arg('pipeline_stages', stages)} or drop one of them")
        if world_size % stages:
            what = (f"{arg('split_points')} makes {stages} stages, which" if self.options.split_points
                    else arg("pipeline_stages", stages))
            raise UsageError(f"{what} does not divide the {world_size} processes; use a world size that is a "
                             f"multiple of {stages} (e.g. {arg('nproc_per_node', stages)})")
        m = self.microbatches(world_size)
        if self.options.schedule == "1f1b" and m < stages:
            raise UsageError(f"{arg('schedule', '1f1b')} needs at least as many micro-batches as stages ({stages}); "
                             f"use {arg('microbatches', stages)} or {arg('schedule', 'gpipe')}")

    def check_plan(self, world_size, model, batch_size):
        stages = self.stage_count(world_size)
        if model is not None:
            plan_split(model, stages, self.options.split_points, "strategy pipeline", "pipeline_stages")
        m = self.microbatches(world_size)
        if batch_size is not None and batch_size % m:
            fits = [d for d in range(m, batch_size + 1) if batch_size % d == 0][:1] or [batch_size]
            raise UsageError(f"{arg('microbatches', m)} does not divide the batch of {batch_size}; "
                             f"use {arg('microbatches', fits[0])} or a {arg('batch_size')} that is a multiple of {m}")

    def layout(self, ctx) -> tuple[int, int, int, int]:
        """(stage, stages, replica, replicas) of this rank."""
        stages = self.stage_count(ctx.world_size)
        return ctx.rank % stages, stages, ctx.rank // stages, ctx.world_size // stages

    def data_parallel(self, ctx):
        _, _, replica, replicas = self.layout(ctx)
        return replica, replicas

    def holds_outputs(self, ctx):
        stage, stages, _, _ = self.layout(ctx)
        return stage == stages - 1

    def output_holders(self, ctx):
        return self.layout(ctx)[3]

    def whole_batches_only(self):
        return True  # micro-batches of equal size: an epoch's short last batch is dropped

    def describe(self, ctx):
        _, stages, _, replicas = self.layout(ctx)
        return {**super().describe(ctx), "pipeline_stages": stages, "pipeline_replicas": replicas,
                "schedule": self.options.schedule, "microbatches": self.microbatches(ctx.world_size)}

    # -- set-up -----------------------------------------------------------------------------
    def setup(self, ctx, model, optimizer):
        stage, stages, replica, replicas = self.layout(ctx)
        plan = plan_split(model, stages, self.options.split_points, "strategy pipeline", "pipeline_stages")
        parts = split_model(model, plan)
        part_params = parameter_counts(parts)
        if not part_params[stage]:
            raise UsageError(f"pipeline stage {stage} ({', '.join(plan[stage])}) has no parameters; "
                             f"choose {arg('split_points')} so that every stage has some")
        before = dict(model.named_parameters())
        mine = parts[stage].to(ctx.device)
        # Every rank creates every group, in the same order (torch.distributed requires it).
        pipe_group = replica_group = None
        for r in range(replicas):
            group = dist.new_group([r * stages + s for s in range(stages)])
            if r == replica:
                pipe_group = group
        for s in range(stages):
            group = dist.new_group([r * stages + s for r in range(replicas)])
            if s == stage:
                replica_group = group
        optimizer = model_state.retarget_optimizer(optimizer, before, mine)
        prepared = PipelinePrepared(self, ctx, PipelineStageModel(mine, stage, stages), optimizer, module=mine)
        prepared.layout = (stage, stages, replica, replicas)
        prepared.pipe_group, prepared.replica_group = pipe_group, replica_group
        prepared.plan, prepared.part_params = plan, part_params
        prepared.n_micro = self.microbatches(ctx.world_size)
        prepared.banner = (f"scaletrain: pipeline: {stages} stage(s) × {replicas} replica(s), {self.options.schedule} "
                           f"schedule, {prepared.n_micro} micro-batches; stages {describe_plan(plan, part_params)}")
        return prepared


class PipelinePrepared(Prepared):
    """This process's stage, its schedules and groups."""

    _sync = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.schedules: dict[tuple[bool, int], object] = {}
        self._loss_fn, self._scale = None, 1.0

    def _loss(self, outputs, targets):
        return self._loss_fn(outputs, targets) * (self._scale / self.n_micro)

    @staticmethod
    def _tensors(batch, targets) -> tuple[torch.Tensor, Any]:
        inputs, rest = split(batch, targets)
        if not isinstance(inputs, torch.Tensor) or len(rest) != 1:
            raise UsageError("a pipeline passes one tensor from stage to stage: give (inputs, targets) batches of "
                             "tensors (or a lone tensor of inputs); for mapping batches use strategy ddp or fsdp")
        return inputs, rest[0]

    # -- training ---------------------------------------------------------------------------
    def forward_backward(self, batch, targets=NO_TARGETS, loss_fn=None, scale=1.0):
        inputs, targets = self._tensors(batch, targets)
        stage, stages, _, replicas = self.layout
        self._loss_fn, self._scale = loss_fn or F.cross_entropy, scale
        losses: list[torch.Tensor] = []
        first, last = stage == 0, stage == stages - 1
        if len(inputs) % self.n_micro:
            raise UsageError(f"{arg('microbatches', self.n_micro)} does not divide this batch of {len(inputs)}; "
                             f"give batches whose size is a multiple of {self.n_micro}")
        schedule = self.schedule(True, len(inputs))
        with self.autocast():
            # The first stage feeds the inputs, the last compares with the targets; the
            # others receive activations and gradients from their neighbours.
            schedule.step(*([inputs] if first else []), target=targets if last else None,
                          losses=losses if last else None)
        if self._sync and replicas > 1:
            self._all_reduce_gradients(replicas)
        if not last:
            return torch.zeros((), device=self.ctx.device)
        return (torch.stack([l.detach() for l in losses]).sum() / scale).float()

    def grad_norm(self, parameters, norm_type=2.0):
        """The stages of one pipeline hold disjoint parts of the model: their norms combine
        over the pipeline's group (replicas hold the same gradients after synchronisation)."""
        norm = super().grad_norm(parameters, norm_type).to(torch.float32)
        if norm_type == float("inf"):
            dist.all_reduce(norm, op=dist.ReduceOp.MAX, group=self.pipe_group)
            return norm
        power = norm ** norm_type
        dist.all_reduce(power, group=self.pipe_group)
        return power ** (1.0 / norm_type)

    def _all_reduce_gradients(self, replicas):
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])  # one message instead of one per tensor
        dist.all_reduce(flat, group=self.replica_group)
        flat /= replicas
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    @contextlib.contextmanager
    def no_sync(self):
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def predict(self, inputs):
        if not isinstance(inputs, torch.Tensor):
            self._tensors(inputs, None)  # raises the one-line refusal
        stage, stages, _, _ = self.layout
        n = len(inputs)
        pad = (-n) % self.n_micro  # the schedule needs M equal micro-batches: repeat rows, drop after
        if pad:
            inputs = torch.cat([inputs, inputs[torch.arange(pad, device=inputs.device) % n]])
        with self.autocast():
            out = self.schedule(False, len(inputs)).eval(*([inputs] if stage == 0 else []))
        return out[:n] if stage == stages - 1 else None

    def schedule(self, training: bool, batch: int):
        """The schedule for a batch size: a stage fixes its activation shapes at its first
        step, so each batch size (the last evaluation batch is usually smaller) gets its own."""
        key = (training, batch)
        if key not in self.schedules:
            from torch.distributed import pipelining

            stage, stages, _, _ = self.layout
            pipe_stage = pipelining.PipelineStage(self.module, stage, stages, self.ctx.device, group=self.pipe_group)
            if training:
                # scale_grads=False: the loss function divides by M itself, because the schedule's
                # own scaling would also divide gradients accumulated over earlier steps.
                self.schedules[key] = getattr(pipelining, SCHEDULES[self.strategy.options.schedule])(
                    pipe_stage, n_microbatches=self.n_micro, loss_fn=self._loss, scale_grads=False)
            else:
                self.schedules[key] = pipelining.ScheduleGPipe(pipe_stage, n_microbatches=self.n_micro)
        return self.schedules[key]

    def describe(self):
        return {**super().describe(), "stages": self.plan, "stage_parameters": self.part_params}

    # -- state: the stages' shares, gathered into the whole model and dealt out again ---------
    def state_dict(self, full, optimizer=None):
        if not full:
            return super().state_dict(full, optimizer)
        _, _, replica, _ = self.layout
        # Replica 0's stages together hold the whole model; the other replicas hold copies.
        mine = _to_cpu(model_state.local_state(self.module, optimizer)) if replica == 0 else None
        shares = gather_to_rank0(mine)
        if self.ctx.rank != 0:
            return {}
        whole = {"model": {}, "optimizer": {}}
        for share in shares:
            if share is not None:
                whole["model"].update(share["model"])
                whole["optimizer"].update(share["optimizer"])
        return whole

    def load_state_dict(self, state, full, optimizer=None):
        if not full:
            return super().load_state_dict(state, full, optimizer)
        template = model_state.local_state(self.module, optimizer)
        wanted = {"model": list(template["model"]), "optimizer": list(template["optimizer"])}
        requests = gather_to_rank0(wanted)
        shares: list = [None] * self.ctx.world_size
        if self.ctx.rank == 0:
            shares = [_share_for(state, request) for request in requests]
        share = scatter_from_rank0(shares)
        if isinstance(share, str):  # rank 0 found keys missing: every rank raises the same error
            raise UsageError(share)
        model_state.load_local_state(self.module, optimizer, share)


def _to_cpu(state: dict) -> dict:
    return {part: {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
            for part, values in state.items()}


def _share_for(whole: dict, request: dict):
    """The part of the whole state one stage asked for, or the error's text."""
    missing = [k for k in request["model"] if k not in whole["model"]]
    if missing:
        return (f"the checkpoint has no {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} for this pipeline "
                "stage: it holds another model")
    optimizer = whole.get("optimizer")
    return {"model": {k: whole["model"][k] for k in request["model"]},
            "optimizer": None if optimizer is None else {k: optimizer[k] for k in request["optimizer"] if k in optimizer}}
