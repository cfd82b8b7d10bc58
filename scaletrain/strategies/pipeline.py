"""`pipeline`: distributed model parallel with torch.distributed.pipelining. The model is cut
into S stages, one per process (possibly on different machines); each batch is cut into M
micro-batches that flow through the stages on a schedule (GPipe: all forwards, then all
backwards; 1F1B: one forward, one backward in the steady state, so fewer activations wait).

World size S × R gives R replicas of the pipeline. Rank r is stage r % S of replica r // S;
replica k reads data shard k, and the R copies of each stage all-reduce their gradients.
Only the last stage has outputs, so the loss and the accuracy come from there.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ..errors import UsageError
from .base import Strategy
from .model_state import rebuild_optimizer
from .splitting import describe_plan, parameter_counts, parse_split_points, plan_split, split_model

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


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
    option_flags = {"pipeline_stages": "--pipeline-stages", "microbatches": "--microbatches",
                    "schedule": "--schedule", "split_points": "--split-points"}

    def __init__(self, **options):
        super().__init__(**options)
        self.split_points = parse_split_points(self.options.get("split_points"))
        self.schedule_name = self.options.get("schedule", "1f1b")
        if self.schedule_name not in SCHEDULES:
            raise UsageError(f"--schedule {self.schedule_name!r}: choose one of {', '.join(SCHEDULES)}")
        self._sync = True

    # -- the plan ---------------------------------------------------------------------------
    def stage_count(self, world_size: int) -> int:
        if self.split_points:
            return len(self.split_points) + 1
        return self.options.get("pipeline_stages", world_size)

    def microbatches(self, world_size: int) -> int:
        return self.options.get("microbatches", self.stage_count(world_size))

    def check_world_size(self, world_size):
        stages = self.stage_count(world_size)
        given = self.options.get("pipeline_stages")
        if given is not None and self.split_points and given != stages:
            raise UsageError(f"--split-points makes {stages} stages but --pipeline-stages is {given}; "
                             f"give --pipeline-stages {stages} or drop one of them")
        if world_size % stages:
            what = f"--split-points makes {stages} stages, which" if self.split_points else f"--pipeline-stages {stages}"
            raise UsageError(f"{what} does not divide the {world_size} processes; "
                             f"use a world size that is a multiple of {stages} (e.g. --nproc-per-node {stages})")
        m = self.microbatches(world_size)
        if self.schedule_name == "1f1b" and m < stages:
            raise UsageError(f"--schedule 1f1b needs at least as many micro-batches as stages ({stages}); "
                             f"use --microbatches {stages} or --schedule gpipe")

    def check_plan(self, world_size, model, batch_size):
        stages = self.stage_count(world_size)
        if model is not None:
            plan_split(model, stages, self.split_points, "--strategy pipeline", "--pipeline-stages")
        m = self.microbatches(world_size)
        if batch_size is not None and batch_size % m:
            fits = [d for d in range(m, batch_size + 1) if batch_size % d == 0][:1] or [batch_size]
            raise UsageError(f"--microbatches {m} does not divide the batch of {batch_size}; "
                             f"use --microbatches {fits[0]} or a --batch-size that is a multiple of {m}")

    def layout(self, run) -> tuple[int, int, int, int]:
        """(stage, stages, replica, replicas) of this rank."""
        stages = self.stage_count(run.world_size)
        return run.rank % stages, stages, run.rank // stages, run.world_size // stages

    def data_parallel(self, run):
        _, _, replica, replicas = self.layout(run)
        return replica, replicas

    def holds_outputs(self, run):
        stage, stages, _, _ = self.layout(run)
        return stage == stages - 1

    def output_holders(self, run):
        return self.layout(run)[3]

    # -- set-up -----------------------------------------------------------------------------
    def setup(self, run, model, optimizer):
        stage, stages, replica, replicas = self.layout(run)
        plan = plan_split(model, stages, self.split_points, "--strategy pipeline", "--pipeline-stages")
        parts = split_model(model, plan)
        self.plan, self.part_params = plan, parameter_counts(parts)
        if not self.part_params[stage]:
            raise UsageError(f"pipeline stage {stage} ({', '.join(plan[stage])}) has no parameters; "
                             "choose --split-points so that every stage has some")
        before = dict(model.named_parameters())
        mine = parts[stage].to(run.device)
        # Every rank creates every group, in the same order (torch.distributed requires it).
        self.pipe_group = self.replica_group = None
        for r in range(replicas):
            group = dist.new_group([r * stages + s for s in range(stages)])
            if r == replica:
                self.pipe_group = group
        for s in range(stages):
            group = dist.new_group([r * stages + s for r in range(replicas)])
            if s == stage:
                self.replica_group = group
        self.layout_now = (stage, stages, replica, replicas)
        run.print(f"scaletrain: pipeline: {stages} stage(s) × {replicas} replica(s), {self.schedule_name} schedule, "
                  f"{self.microbatches(run.world_size)} micro-batches; stages {describe_plan(plan, self.part_params)}")
        self.stage_module, self.n_micro, self.device = mine, self.microbatches(run.world_size), run.device
        self.schedules: dict[tuple[bool, int], object] = {}
        wrapped = PipelineStageModel(mine, stage, stages)
        return self.remember(wrapped, rebuild_optimizer(optimizer, before, mine))

    def _loss(self, outputs, targets):
        return self._loss_fn(outputs, targets) * (self._scale / self.n_micro)

    # -- training ---------------------------------------------------------------------------
    def forward_backward(self, run, model, inputs, targets, loss_fn, scale=1.0):
        stage, stages, _, replicas = self.layout_now
        self._loss_fn, self._scale = loss_fn, scale
        losses: list[torch.Tensor] = []
        first, last = stage == 0, stage == stages - 1
        if len(inputs) % self.n_micro:
            raise UsageError(f"--microbatches {self.n_micro} does not divide this batch of {len(inputs)}; "
                             f"give batches whose size is a multiple of {self.n_micro}")
        schedule = self.schedule(True, len(inputs))
        with self.autocast(run.device):
            # The first stage feeds the inputs, the last compares with the targets; the
            # others receive activations and gradients from their neighbours.
            schedule.step(*([inputs] if first else []), target=targets if last else None,
                          losses=losses if last else None)
        if self._sync and replicas > 1:
            self._all_reduce_gradients(model, replicas)
        if not last:
            return torch.zeros((), device=run.device)
        return (torch.stack([l.detach() for l in losses]).sum() / scale).float()

    def _all_reduce_gradients(self, model, replicas):
        grads = [p.grad for p in model.module.parameters() if p.grad is not None]
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
    def no_sync(self, model):
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def predict(self, run, model, inputs):
        stage, stages, _, _ = self.layout_now
        n = len(inputs)
        pad = (-n) % self.n_micro  # the schedule needs M equal micro-batches: repeat rows, drop after
        if pad:
            inputs = torch.cat([inputs, inputs[torch.arange(pad, device=inputs.device) % n]])
        with self.autocast(run.device):
            out = self.schedule(False, len(inputs)).eval(*([inputs] if stage == 0 else []))
        return out[:n] if stage == stages - 1 else None

    def schedule(self, training: bool, batch: int):
        """The schedule for a batch size: a stage fixes its activation shapes at its first
        step, so each batch size (the last evaluation batch is usually smaller) gets its own."""
        key = (training, batch)
        if key not in self.schedules:
            stage, stages, _, _ = self.layout_now
            pipe_stage = PipelineStage(self.stage_module, stage, stages, self.device, group=self.pipe_group)
            if training:
                # scale_grads=False: the loss function divides by M itself, because the schedule's
                # own scaling would also divide gradients accumulated over earlier steps.
                self.schedules[key] = SCHEDULES[self.schedule_name](pipe_stage, n_microbatches=self.n_micro,
                                                                    loss_fn=self._loss, scale_grads=False)
            else:
                self.schedules[key] = ScheduleGPipe(pipe_stage, n_microbatches=self.n_micro)
        return self.schedules[key]

    def whole_batches_only(self, run):
        return True  # micro-batches of equal size: an epoch's short last batch is dropped

    def describe(self, run):
        _, stages, _, replicas = self.layout_now
        return {**super().describe(run), "pipeline_stages": stages, "pipeline_replicas": replicas,
                "schedule": self.schedule_name, "microbatches": self.n_micro, "stages": self.plan,
                "stage_parameters": self.part_params}
