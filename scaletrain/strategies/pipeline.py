"""`pipeline`: distributed model parallel with torch.distributed.pipelining. The model is cut
into P stages (the degree `pp`; `pipeline_stages` is accepted for it), one per process of a pipeline (possibly
on different machines); each batch is cut into M micro-batches that flow through the stages
on a schedule (GPipe or 1F1B).

The processes P stages leave are data-parallel replicas of the pipeline (dp_replicate: each
reads its own shard of every batch, the copies of each stage keep their gradients equal);
with `dp_shard` the copies of each stage shard it instead (pipeline × FSDP), and with `tp`
each stage's layers are split by tensor parallel too (pipeline × FSDP × TP: 3-D).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..foundation.errors import UsageError, arg
from ..foundation.options import check_choice, check_count, option
from ..foundation.text_values import name_list, positive_int
from ..parallel.config import FSDP
from ..parallel.dims import DP_REPLICATE, PP
from ..parallel.pipeline import SCHEDULES
from ..parallel.splitting import parse_split_points, cut_blocks
from .base import MeshOptions, Strategy, degree
from .mp import SPLIT_POINTS_HELP


@dataclass(frozen=True)
class PipelineOptions(MeshOptions):
    pp: Optional[int] = degree(PP, aliases=("pipeline_stages",))
    schedule: str = option("1f1b", "gpipe (all forwards, then all backwards) or 1f1b (fewer activations kept)",
                           choices=SCHEDULES)
    microbatches: Optional[int] = option(
        None, "micro-batches each batch is cut into (default: the number of stages; must divide the batch size)",
        metavar="M", parse=positive_int)
    split_points: Optional[tuple] = option(None, SPLIT_POINTS_HELP, metavar="BLOCK,BLOCK", parse=name_list)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("schedule", self.schedule, SCHEDULES)
        if self.microbatches is not None:
            check_count("microbatches", self.microbatches)
        object.__setattr__(self, "split_points", parse_split_points(self.split_points))


class PipelineStrategy(Strategy):
    name = "pipeline"
    help = "distributed model parallel: stages in separate processes, micro-batches on a GPipe/1F1B schedule"
    Options = PipelineOptions
    pipelined = True

    # -- the plan ---------------------------------------------------------------------------
    def stages_given(self) -> Optional[int]:
        if self.options.split_points:
            return len(self.options.split_points) + 1
        return self.options.pp

    def given_degrees(self):
        return {**super().given_degrees(), PP: self.stages_given()}

    def stage_option(self) -> str:
        """The pipeline degree's name as the user gave it."""
        return self.labels.get(PP, PP)

    def fill_for(self, given):
        if given[PP] is None:
            return PP  # every process a stage, unless other degrees take some
        return DP_REPLICATE if given[DP_REPLICATE] is None else None

    def data_parallel(self, dims):
        # The copies of each stage synchronise through FSDP2 (sharded, or replicated with
        # dp_shard 1): torch's pipelining drives FSDP modules through a schedule itself.
        return FSDP if dims.dp_size > 1 else None

    def microbatches(self, world_size: int) -> int:
        return self.options.microbatches or self.dims(world_size).pp

    def check_world_size(self, world_size):
        given = self.options.pp
        stages = self.stages_given()
        option = self.stage_option()
        if given is not None and self.options.split_points and given != stages:
            raise UsageError(f"{arg('split_points')} makes {stages} stages but {arg(option, given)}; "
                             f"give {arg(option, stages)} or drop one of them")
        if self.options.split_points and world_size % stages:
            raise UsageError(f"{arg('split_points')} makes {stages} stages, which does not divide the {world_size} "
                             f"processes; use a world size that is a multiple of {stages} (e.g. "
                             f"{arg('nproc_per_node', stages)})")
        super().check_world_size(world_size)
        dims = self.dims(world_size)
        m = self.microbatches(world_size)
        if self.options.schedule == "1f1b" and m < dims.pp:
            raise UsageError(f"{arg('schedule', '1f1b')} needs at least as many micro-batches as stages ({dims.pp}); "
                             f"use {arg('microbatches', dims.pp)} or {arg('schedule', 'gpipe')}")

    def check_model(self, world_size, model, batch_size):
        super().check_model(world_size, model, batch_size)
        stages = self.dims(world_size).pp
        if model is not None:
            cut_blocks(model, stages, self.options.split_points, "strategy pipeline", self.stage_option())
        m = self.microbatches(world_size)
        if batch_size is not None and batch_size % m:
            fits = [d for d in range(m, batch_size + 1) if batch_size % d == 0][:1] or [batch_size]
            raise UsageError(f"{arg('microbatches', m)} does not divide the batch of {batch_size}; "
                             f"use {arg('microbatches', fits[0])} or a {arg('batch_size')} that is a multiple of {m}")

    def describe(self, topology):
        dims = topology.dims
        return {**super().describe(topology), "pipeline_stages": dims.pp, "pipeline_replicas": dims.dp_size,
                "schedule": self.options.schedule, "microbatches": self.microbatches(topology.ctx.world_size)}
