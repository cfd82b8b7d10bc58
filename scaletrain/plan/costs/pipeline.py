"""The pipeline's cost terms: the model cut into stages as the strategies cut them, each
micro-batch's way through them on the schedule (GPipe, 1F1B: played out across machines),
the stages' measured work and the bubble around the slowest one, the activations sent between
stages, and the micro-batches a stage keeps in flight."""

from __future__ import annotations

from typing import Optional

from ...parallel.config import ParallelConfig
from .. import formulas as f
from ..probe import Probe
from ..scenario import Scenario
from ..stages import stage_costs, stage_groups
from .registry import CostTerms, register
from .terms import Step, Terms


def stages(probe: Probe, config: ParallelConfig) -> Optional[list[list[int]]]:
    fp = probe.footprint
    return stage_groups(probe.block_params or tuple(fp.block_param_bytes), config.dims.pp)


def one_transfer(probe: Probe, s: Scenario, microbatches: int, groups: Optional[list[list[int]]] = None) -> float:
    """Seconds to send one micro-batch's activations across the largest cut."""
    fp = probe.footprint
    per_sample = fp.boundary_bytes_per_sample
    if groups and fp.unit_output_bytes_per_sample:  # the outputs at the cuts, not every unit's
        per_sample = max(fp.unit_output_bytes_per_sample[g[-1]] for g in groups[:-1])
    size = per_sample * probe.batch_size / microbatches
    return size / s.busbw(size) + s.alpha_s


def activation_transfers(probe: Probe, s: Scenario, stages: int, microbatches: int, slowest_stage_s: float = 0.0,
                         groups: Optional[list[list[int]]] = None) -> float:
    """Each micro-batch crosses the stage boundaries forward (activations) and backward
    (their gradients). The schedule sends and receives while the stages compute, so the
    critical path holds the first micro-batch's way down and the last one's way back, 2(p − 1)
    transfers, and of each further micro-batch's only what its transfer takes beyond the
    slowest stage's compute (a link slower than the stages sets the pace)."""
    if stages == 1:
        return 0.0
    one = one_transfer(probe, s, microbatches, groups)
    return 2 * (stages - 1) * one + (microbatches - 1) * max(0.0, one - slowest_stage_s)


def _boundary_latencies(s: Scenario, pp: int) -> list[float]:
    """The latency between each pair of consecutive pipeline stages: the network's where they
    are on different machines (the pipeline is the mesh's outermost dimension, so a stage's
    processes are consecutive ranks), this machine's otherwise."""
    ranks = s.world_size // pp
    local = s.link.alpha_s if s.link else 0.0
    return [s.alpha_s if (j * ranks) // s.nproc_per_node != ((j + 1) * ranks) // s.nproc_per_node else local
            for j in range(pp - 1)]


def schedule(step: Step) -> Terms:
    """The stages' measured blocks on their micro-batches, at the pace of the slowest stage;
    what the schedule keeps a stage waiting beyond its own work is the bubble."""
    probe, s, config, c = step.probe, step.s, step.config, step.compute
    pp, m = config.dims.pp, config.microbatches
    blocks = range(len(probe.footprint.block_param_bytes))
    costs = stage_costs(probe, c, step.groups, m, probe.batch_size, [step.held_share([i]) for i in blocks], s.threads)
    one = one_transfer(probe, s, m, step.groups) if pp > 1 else 0.0
    if config.option("schedule", "1f1b") == "gpipe" or pp == 1:
        busy = costs.busy_seconds(m) - max(costs.optimizer_s)
        transfer = activation_transfers(probe, s, pp, m, max(costs.per_microbatch_s), step.groups)
    else:  # 1F1B: the stages around the slowest one overlap with it (StageCosts.one_f_one_b)
        busy, transfer = costs.one_f_one_b(m, one)
        busy -= transfer
        if s.nodes > 1:
            # Across machines the latency is milliseconds, and each transfer waits for its
            # receiver to post its receive: played out (schedule_sim) rather than counted
            # once each way (a boundary inside a machine keeps this machine's latency).
            transfer = costs.waited_transfers(m, _boundary_latencies(s, pp), one - s.alpha_s)
    # Each stage steps its own share of the state, and a later stage's step overlaps the
    # backwards still running before it (StageCosts.optimizer_tail).
    held_share = step.state_share / step.stage_fraction if step.stage_fraction else 0.0
    work = m * max(costs.per_microbatch_s)  # the slowest stage's own
    return Terms(compute_s=c.data_s + work + costs.optimizer_tail(held_share, one), bubble_s=busy - work,
                 comm_s=transfer, exposed_s=transfer,
                 note=f"{costs.describe()}; bubble {f.pipeline_bubble(pp, m):.0%} of an even split")


def in_flight(config: ParallelConfig, stage: int, batch: int) -> tuple[float, float]:
    """(samples whose activations stage `stage` keeps at once, samples of one micro-batch):
    GPipe keeps every micro-batch's activations until backward; 1F1B keeps at most as many as
    there are stages from this one to the last (the last stage goes straight to backward)."""
    m = config.microbatches
    kept = m if config.option("schedule") == "gpipe" else min(config.dims.pp - stage, m)
    return batch / m * kept, batch / m


def transient_bytes(probe: Probe, config: ParallelConfig, held: float, largest_unit: float, largest_tensor: float,
                    shards: int) -> float:
    """A micro-batch's gradient before it is added to those of the micro-batches before it
    (a shard of it, where FSDP shards the stage)."""
    return largest_tensor / shards if config.microbatches > 1 else 0.0


def candidates(world_size: int, batch_size: int, blocks: int, tensor_parallel: bool,
               sequence: int = 0) -> list[tuple[str, dict]]:
    """Every number of stages the model's units allow, each with one, two and four
    micro-batches per stage (those that divide the batch), replicated and, below the whole
    world, sharded over the processes the stages leave."""
    found: list[tuple[str, dict]] = []
    for p in (d for d in range(2, world_size + 1) if world_size % d == 0 and d <= blocks):
        for m in sorted({p, 2 * p, 4 * p}):
            if batch_size % m == 0:
                found.append(("pipeline", {"pp": p, "microbatches": m}))
                if p < world_size:
                    found.append(("pipeline", {"pp": p, "microbatches": m, "dp_shard": world_size // p}))
    return found


COSTS = register(CostTerms("pipeline", stages=stages, schedule=schedule, in_flight=in_flight,
                          transient_bytes=transient_bytes, candidates=candidates))
