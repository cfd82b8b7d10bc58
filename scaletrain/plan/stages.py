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
from .formulas import FORWARD_SHARE
from .probe import Compute, Probe
from .schedule_sim import one_f_one_b_seconds


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

    def one_f_one_b(self, microbatches: int, transfer_s: float) -> tuple[float, float]:
        """A step's forward + backward under 1F1B, and the part of it that transfers between
        stages (`transfer_s` each) add: (seconds, of which transfers). The slowest stage k
        works through its m micro-batches; the stages before it fill and drain around that
        (their forward and backward of one micro-batch, and 2k transfers); the stages after it
        take the first micro-batch there and back while k runs its warm-up forwards (p−1−k of
        them, a third of its time each), and k waits only for what that round trip takes
        beyond them. When the last stage is the slowest this is GPipe's `busy_seconds`."""
        costs = self.per_microbatch_s
        k = max(range(len(costs)), key=lambda i: costs[i])
        after = len(costs) - 1 - k

        def step(t: float) -> float:
            round_trip = sum(costs[k + 1:]) + 2 * after * t
            wait = max(0.0, round_trip - after * FORWARD_SHARE * costs[k])
            return (sum(costs[:k]) + 2 * k * t + microbatches * costs[k] + wait
                    + (microbatches - 1) * max(0.0, t - costs[k]))  # a link slower than the stage sets the pace

        total = step(transfer_s)
        return total, total - step(0.0)

    def waited_transfers(self, microbatches: int, latency_s: list[float], data_s: float) -> float:
        """What a step's transfers add under 1F1B when each waits for its receiver
        (schedule_sim): the step played out with them, less the step played out without."""
        forward = [FORWARD_SHARE * c for c in self.per_microbatch_s]
        backward = [c - f for c, f in zip(self.per_microbatch_s, forward)]
        without = one_f_one_b_seconds(forward, backward, microbatches, [0.0] * len(latency_s), 0.0)
        return max(0.0, one_f_one_b_seconds(forward, backward, microbatches, latency_s, data_s) - without)

    def optimizer_tail(self, share: float = 1.0, transfer_s: float = 0.0) -> float:
        """What the stages' optimizer steps add to a step: the first stage finishes last (its
        backward of the last micro-batch follows every later stage's), so a later stage steps
        while the stages before it still go back through that micro-batch (their backward and
        a transfer each), and only what its step takes beyond that is added. The CNN's last
        stage holds 99% of its parameters (its large linear layer) and steps while the first
        stage's convolutions run backward: counting its whole step put a pipeline of 2 about
        12% slower than measured. `share`: the part of a stage's state each process steps
        (tensor parallel's slice, FSDP's shard)."""
        lead, tail = 0.0, 0.0
        for work, optimizer in zip(self.per_microbatch_s, self.optimizer_s):
            tail = max(tail, optimizer * share - lead)
            lead += (1 - FORWARD_SHARE) * work + transfer_s
        return tail

    def describe(self) -> str:
        total = sum(self.per_microbatch_s) or 1.0
        return "stages " + " | ".join(f"{t * 1e3:.1f} ms ({t / total:.0%})" for t in self.per_microbatch_s) + \
            " per micro-batch"


def block_curve(probe: Probe, threads: Optional[int] = None) -> list[tuple[int, list[float]]]:
    """(samples, each block's forward + backward seconds) measured, fewest samples first: on one
    thread where `threads` is 1 and the probe timed that, else at the one-process job's threads."""
    whole, micro, b = probe.block_s, probe.block_micro_s, probe.microbatch_size
    if not whole or len(micro) != len(whole):
        return []
    if threads == 1 and probe.block_one_thread_s:
        return sorted((n, list(t)) for n, t in probe.block_one_thread_s if len(t) == len(whole))
    return sorted({b: list(micro), **{n: list(t) for n, t in probe.block_sizes_s if len(t) == len(whole)},
                   probe.batch_size: list(whole)}.items())


def block_times_at(probe: Probe, samples: float, threads: Optional[int] = None) -> Optional[list[float]]:
    """Each block's forward + backward on `samples` samples: measured at the probe's micro-batch,
    at the sizes between it and the whole batch (halvings of the batch) and at the whole batch,
    and in between (or beyond) along the line through the two nearest — a block's time is a
    fixed part plus a part that grows with the samples, but not along one line: cache sizes
    and the allocator (under --steady-memory a tensor of 2 MB or more gets fresh pages) bend it
    (the CNN's first two blocks on one core: 11.2 ms at 16 samples, where the line through 4
    and 32 samples said 15.5)."""
    points = block_curve(probe, threads)
    if not points:
        return None
    exact = dict(points).get(samples)
    if exact is not None:
        return exact
    if len(points) < 2:
        return points[-1][1]
    # The segment around `samples`; below the smallest size or above the largest, the nearest one.
    i = next((k for k in range(1, len(points) - 1) if samples < points[k][0]), len(points) - 1)
    (n0, t0), (n1, t1) = points[i - 1], points[i]
    fraction = (samples - n0) / (n1 - n0)
    return [max(0.0, a + (c - a) * fraction) for a, c in zip(t0, t1)]


def stage_costs(probe: Probe, compute: Compute, groups: list[list[int]], microbatches: int,
                batch: Optional[int] = None, speedup: Optional[list[float]] = None,
                threads: Optional[int] = None) -> StageCosts:
    """Measured per-stage costs of micro-batches of `batch` / `microbatches` samples (batch:
    the probe's by default) on processes of `threads` threads (`compute` is their step);
    stages of equal cost when the probe timed no blocks. `speedup`: a factor per block by
    which its work shrinks (tensor parallel's share)."""
    params = list(probe.block_params) or [1] * len(groups)
    share = [sum(params[i] for i in g) / max(1, sum(params)) for g in groups]
    optimizer = tuple(compute.optimizer_s * s for s in share)
    batch = batch or probe.batch_size
    micro = block_times_at(probe, batch / microbatches, threads)
    if micro is None or len(micro) != len(params):
        equal = compute.fb_s / microbatches / len(groups)
        return StageCosts(tuple(equal for _ in groups), optimizer)
    # The whole step at this thread count (processes beside it included) / the blocks' sum on
    # the whole batch at the threads they were timed with.
    scale = compute.fb_s / sum(block_times_at(probe, probe.batch_size, threads))
    factor = speedup or [1.0] * len(micro)
    return StageCosts(tuple(sum(micro[i] * factor[i] for i in g) * scale for g in groups), optimizer)
