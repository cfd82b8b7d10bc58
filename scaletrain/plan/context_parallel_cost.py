"""Context parallel's cost terms: what splitting every sequence `cp` ways does to one
process's step and memory.

- compute: each process computes 1/cp of every sequence's tokens — the load-balanced split
  gives each the same share of causal attention too — so 1/cp of forward and backward;
- the ring: in every attention, forward passes the keys and values round (cp − 1 hops of a
  1/cp piece of them), backward passes them round again and the pieces' gradients with them
  (cp − 1 hops, and cp hops of the gradients, which travel home after the last), and a block
  computed again under full activation checkpointing passes them once more; each hop is the
  cp group's link, its latency and the bandwidth at the piece's size;
- what hides it: a hop goes while the process attends to the piece before it, so on a device
  that communicates while it computes (`Machine.overlap`) attention's compute hides it
  (attention's share of the arithmetic, measured on one forward: `Footprint.attention_*`);
- memory: the activations — every one a token's — divided by cp (the weights are FSDP's,
  sharded over dp_shard × cp: `ParallelDims.shards`).
"""

from __future__ import annotations

from ..parallel.config import ParallelConfig
from ..parallel.dims import CP
from . import formulas as f
from .machine import Machine
from .probe import Probe
from .scenario import Scenario


def ring_arithmetic_seconds(probe: Probe, config: ParallelConfig, forward_backward_s: float) -> float:
    """What the ring's blocks and merges add to a process's attention beyond 1/cp of the whole
    sequence's (the probe's ratio for this cp, else the nearest degree measured), in a step
    whose forward and backward take `forward_backward_s` on one process for the whole sequence."""
    cp = config.dims.cp
    if cp == 1 or not probe.ring_ratio:
        return 0.0
    ratio = probe.ring_ratio.get(cp) or probe.ring_ratio[min(probe.ring_ratio, key=lambda c: abs(c - cp))]
    return forward_backward_s * probe.attention_fraction * (ratio - 1) / cp


def measured_ring_seconds(probe: Probe, s: Scenario, config: ParallelConfig, forward_backward_s: float):
    """Where the probe ran this ring — as many processes as its job, as many threads — what the
    ring took beyond its arithmetic there (its communication and waiting), for this step; None
    where it did not."""
    m, cp = probe.ring_mesh, config.dims.cp
    if m is None or m.world_size != cp or m.threads != s.threads or not probe.ring_ratio.get(cp):
        return None
    return max(0.0, forward_backward_s * probe.attention_fraction * (m.step_s - probe.ring_ratio[cp]) / cp)


def token_share(config: ParallelConfig) -> float:
    """The share of each sequence's tokens, and of forward and backward, a process computes."""
    return 1.0 / config.dims.cp


def ring_passes(config: ParallelConfig) -> float:
    """Hops per attention of a step, in units of one piece: forward's, backward's keys and
    values and their gradients, and forward's again where full checkpointing recomputes it."""
    cp = config.dims.cp
    mode = config.option("activation_checkpointing", "none")
    recomputed = (1.0 / (config.option("ac_every") or 1)) if mode == "full" or config.option("ac_every") else 0.0
    return (cp - 1) * (2 + recomputed) + cp


def ring_seconds(probe: Probe, s: Scenario, config: ParallelConfig, samples: float) -> float:
    """The ring's communication in one step of `samples` whole sequences per process."""
    cp = config.dims.cp
    if cp == 1:
        return 0.0
    group = s.group(config.dims.span(CP))
    total = 0.0
    for kv in probe.footprint.attention_kv_bytes_per_sample:
        piece = kv * samples / cp
        total += ring_passes(config) * (piece / group.busbw(piece) + group.alpha_s)
    return total


def ring_exposed(probe: Probe, o: Machine, ring: float, forward_backward_s: float) -> float:
    """What of the ring stays on the critical path: attention's compute of this process's
    `forward_backward_s` hides it as far as the device overlaps communication."""
    return f.exposed_seconds(ring, probe.footprint.attention_flop_share * forward_backward_s, o.overlap)
