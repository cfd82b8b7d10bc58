"""Context parallel's cost terms: what splitting every sequence `cp` ways does to one
process's step and memory.

- its share of the work (`token_share`): each process computes 1/cp of every sequence's
  tokens — the load-balanced split gives each the same share of causal attention too — so 1/cp
  of forward and backward, and keeps 1/cp of the activations (the other modules read the share:
  the step's measured work, tensor parallel's all-reduces, checkpointing's recomputation, the
  memory); the weights are FSDP's, sharded over dp_shard × cp (`ParallelDims.shards`);
- what the ring's blocks and merges add to attention's arithmetic: measured by the probe, one
  ring process's arithmetic timed with an exchange that sends nothing (`Probe.ring_ratio`), in
  the share of the step attention takes (`Probe.attention_fraction`);
- the ring's exchange: in every attention, forward passes the keys and values round (cp − 1
  hops of a 1/cp piece of them), backward passes them round again and their gradients with them
  (cp − 1 hops, and cp hops of the gradients, which travel home after the last), and a block
  computed again under full activation checkpointing passes them once more; each hop at the cp
  group's latency and the bandwidth at the piece's size. A hop goes while the process attends
  to the piece before it, so attention's compute hides it as far as the device communicates
  while it computes (`Machine.overlap`; on CPUs, where Gloo's threads need the same cores,
  not at all). Where the probe's job of several processes ran the real ring on as many
  processes (`Probe.ring_mesh`), what that ring took beyond its arithmetic replaces the formula.
"""

from __future__ import annotations

from ...parallel.config import ParallelConfig
from ...parallel.dims import CP
from .. import formulas as f
from ..probe import Probe
from ..scenario import Scenario
from .registry import CostTerms, register
from .terms import Step, Terms


def token_share(config: ParallelConfig) -> float:
    """The share of each sequence's tokens, and of forward and backward, a process computes."""
    return 1.0 / config.dims.cp


def ring_passes(config: ParallelConfig) -> float:
    """Hops per attention of a step, in units of one piece: forward's, backward's keys and
    values and their gradients, and forward's again where full checkpointing recomputes it."""
    cp = config.dims.cp
    mode, every = config.option("activation_checkpointing", "none"), config.option("ac_every")
    recomputed = 1.0 / (every or 1) if mode == "full" or every else 0.0
    return (cp - 1) * (2 + recomputed) + cp


def ring_seconds(probe: Probe, s: Scenario, config: ParallelConfig, samples: float) -> float:
    """The ring's communication in one step of `samples` whole sequences per process."""
    cp = config.dims.cp
    group = s.group(config.dims.span(CP))
    total = 0.0
    for kv in probe.footprint.attention_kv_bytes_per_sample:
        piece = kv * samples / cp
        total += ring_passes(config) * (piece / group.busbw(piece) + group.alpha_s)
    return total


def arithmetic_seconds(probe: Probe, cp: int, attention_s: float) -> float:
    """What the ring's blocks and merges add to a process's 1/cp of `attention_s` (the probe's
    ratio for this cp, else the nearest degree it timed)."""
    if not probe.ring_ratio:
        return 0.0
    ratio = probe.ring_ratio.get(cp) or probe.ring_ratio[min(probe.ring_ratio, key=lambda c: abs(c - cp))]
    return attention_s * (ratio - 1) / cp


def measured_beyond_arithmetic(probe: Probe, s: Scenario, cp: int, attention_s: float):
    """Where the probe ran this ring — as many processes as its job, as many threads — what the
    ring took there beyond its arithmetic (its communication and waiting) for a process's 1/cp
    of `attention_s`; None where it did not."""
    m = probe.ring_mesh
    if m is None or m.world_size != cp or m.threads != s.threads or not probe.ring_ratio.get(cp):
        return None
    return max(0.0, attention_s * (m.step_s - probe.ring_ratio[cp]) / cp)


def terms(step: Step) -> Terms:
    probe, s, config, cp = step.probe, step.s, step.config, step.config.dims.cp
    attention = step.compute.fb_s * step.tp_share * probe.attention_fraction  # the whole sequences'
    comm = ring_seconds(probe, s, config, probe.batch_size)
    measured = measured_beyond_arithmetic(probe, s, cp, attention)
    exposed = f.exposed_seconds(comm, attention / cp, step.machine.overlap) if measured is None else measured
    return Terms(compute_s=arithmetic_seconds(probe, cp, attention), comm_s=comm, exposed_s=exposed)


def candidates(world_size: int, batch_size: int, blocks: int, tensor_parallel: bool,
               sequence: int = 0) -> list[tuple[str, dict]]:
    """For a model with attention over sequences the load-balanced split can cut: FSDP over
    context-parallel groups of every degree that fits (and the shards the groups leave)."""
    return [("fsdp", {"cp": c}) for c in range(2, world_size + 1)
            if world_size % c == 0 and sequence and sequence % (2 * c) == 0]


COSTS = register(CostTerms("context_parallel", token_share=token_share, terms=terms, candidates=candidates))
