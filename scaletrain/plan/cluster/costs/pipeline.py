"""The pipeline's cluster costs: 1F1B with few micro-batches played out micro-batch by
micro-batch (plan/schedule_sim.py) with the stages' own times and their transfers; otherwise,
and interleaved with v chunks per rank, the bubble is (p − 1)/v micro-batch times. Stages are
the mesh's outermost dimension: neighbours are gpus/pp ranks apart, on other nodes once that is
a node or more; with sequence parallel each rank sends its share of the activations."""

from __future__ import annotations

from ...schedule_sim import one_f_one_b_seconds
from .parts import StepParts
from .registry import ClusterCostTerms, Schedule, register

#: Sends of a pipeline played out step by step beyond this many are costed in closed form.
SIMULATED_OPERATIONS = 20000


def send_seconds(parts: StepParts) -> float:
    config = parts.config
    sent = parts.activation_bytes / (config.tp if config.sequence_parallel else 1)
    across = config.dims.span("pp") // config.pp >= parts.gpus_per_node
    return parts.net.send(sent, across_nodes=across)


def schedule(parts: StepParts, rank_s: list, compute_s: list) -> Schedule:
    """`rank_s`: each rank's seconds per micro-batch (its layers with their collectives, the
    first rank's embedding, the last one's head and loss); `compute_s`: of that, computation."""
    config, m = parts.config, parts.microbatches
    send_s = send_seconds(parts)
    if config.schedule == "1f1b" and m < 4 * config.pp and m * config.pp <= SIMULATED_OPERATIONS:
        # few micro-batches: the stages' differences and transfers decide; played out
        share = parts.forward_share
        forward = [t * share for t in rank_s]
        backward = [t - f for t, f in zip(rank_s, forward)]
        seconds = one_f_one_b_seconds(forward, backward, m, [parts.net.net_latency] * config.pp, send_s)
        bubble = seconds - m * max(rank_s)
    else:
        v = config.stages_per_rank if config.schedule == "interleaved" else 1
        slowest = max(rank_s)
        bubble = (config.pp - 1) / v * slowest + 2 * (config.pp - 1) * v * send_s
        seconds = m * slowest + bubble
    return Schedule(seconds, bubble, m * max(compute_s), (("pipeline_send_s", send_s),))


def in_flight(config, microbatches: int) -> float:
    """Micro-batches whose activations the busiest pipeline rank (the first) holds at once, in
    units of its whole share of layers: 1F1B's warm-up forwards, min(m, p); interleaved,
    torch's ScheduleInterleaved1F1B's warm-up of (v − 1)·p + 2(p − 1) chunk forwards (at most
    all m·v of them) plus the one in hand, each a 1/v share."""
    p, m, v = config.pp, microbatches, config.stages_per_rank
    if p == 1:
        return 1.0
    if config.schedule == "interleaved" and v > 1:
        return min(m * v, (v - 1) * p + 2 * (p - 1) + 1) / v
    return min(m, p)


COSTS = register(ClusterCostTerms("pipeline", enabled=lambda config: config.pp > 1, schedule=schedule))
