"""Which blocks form each pipeline stage or model-parallel part, and what each one costs.

The cut is the one the strategies make (their own rule, imported here and nowhere else in
the plan): consecutive blocks, balanced by parameter count. What a stage costs is measured,
not inferred from its parameters: each block's forward + backward time on one micro-batch
(probe_rank), scaled to the thread count the stage's process gets by the ratio of the whole
step's forward + backward at that thread count to the blocks' sum on the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..parallel.splitting import balanced_cuts
from .probe import Compute, Probe


def stage_groups(block_params: tuple, stages: int) -> Optional[list[list[int]]]:
    """Block indices of each stage, as the strategies cut them; None when there are fewer
    blocks than stages."""
    if stages < 1 or stages > len(block_params):
        return None
    starts = balanced_cuts([count + 1 for count in block_params], stages)
    ends = [*starts[1:], len(block_params)]
    return [list(range(a, b)) for a, b in zip(starts, ends)]


@dataclass(frozen=True)
class StageCosts:
    per_microbatch_s: tuple
    """Forward + backward seconds of each stage on one micro-batch."""
    optimizer_s: tuple
    """Each stage's optimizer step (its share of the parameters)."""

    def busy_seconds(self, microbatches: int, one_process: bool = False) -> float:
        """A step's schedule (GPipe or 1F1B alike): the first micro-batch passes every stage,
        the other m-1 follow at the pace of the slowest stage; then the optimizer — each
        stage's own at once in a pipeline, one after another in one process (mp)."""
        slowest = max(self.per_microbatch_s)
        optimizer = sum(self.optimizer_s) if one_process else max(self.optimizer_s)
        return sum(self.per_microbatch_s) + (microbatches - 1) * slowest + optimizer

    def describe(self) -> str:
        total = sum(self.per_microbatch_s) or 1.0
        return "stages " + " | ".join(f"{t * 1e3:.1f} ms ({t / total:.0%})" for t in self.per_microbatch_s) + \
            " per micro-batch"


def stage_costs(probe: Probe, compute: Compute, groups: list[list[int]], microbatches: int) -> StageCosts:
    """Measured per-stage costs; stages of equal cost when the probe timed no blocks."""
    params = list(probe.block_params) or [1] * len(groups)
    share = [sum(params[i] for i in g) / max(1, sum(params)) for g in groups]
    optimizer = tuple(compute.optimizer_s * s for s in share)
    # One micro-batch: the blocks timed on the probe's micro-batch, or on the whole batch.
    micro = probe.block_micro_s if microbatches > 1 else probe.block_s
    if not probe.block_s or not micro or len(micro) != len(params):
        equal = compute.fb_s / microbatches / len(groups)
        return StageCosts(tuple(equal for _ in groups), optimizer)
    scale = compute.fb_s / sum(probe.block_s)  # the whole step at this thread count / the blocks at theirs
    return StageCosts(tuple(sum(micro[i] for i in g) * scale for g in groups), optimizer)
