"""Where the processes of a prediction run, and the measured compute they get there.

Where the processes run: `nproc_per_node` processes on each machine like this one (one per
GPU, or one per core on a CPU), as many machines as the world size needs. On a CPU the
processes of a machine share its cores, so each gets cores ÷ processes threads, and its
compute is the probe's step time measured at that thread count next to its neighbours (not
the one-process time divided by n: fewer threads per process do not make a step
proportionally slower, and neighbours share memory bandwidth and caches). Across machines
the ring runs at the slower of the measured bus bandwidth and the network link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from .machine import Machine
from .probe import Compute, Probe
from .probe_link import Link


@dataclass(frozen=True)
class Scenario:
    world_size: int
    nproc_per_node: int
    nodes: int
    threads: int
    alpha_s: float
    link: Optional[Link]
    network_busbw: Optional[float] = None
    """Bytes/s of the network between machines (None: one machine)."""
    oversubscription: float = 1.0
    """More processes than cores on a CPU machine: each gets this share less of a core."""
    network: Optional[Link] = None
    """The network's all-reduce as measured between the machines (bench/plan --hosts); it
    replaces the nominal `network_busbw` size by size."""

    def group(self, span: int) -> "Scenario":
        """The links of a group of `span` consecutive ranks (a mesh dimension with those inside
        it): this machine's measured all-reduce when they fit on one machine, the network's too
        when they do not."""
        if self.nodes == 1 or span <= self.nproc_per_node:
            return replace(self, nodes=1, network_busbw=None, network=None,
                           alpha_s=self.link.alpha_s if self.link else 0.0)
        return self

    def gather_scatter_ratios(self) -> tuple[float, float]:
        """all_gather's and reduce_scatter's measured times over a ring's: across machines the
        network's (its collectives are the slow part), on one machine this machine's."""
        link = self.network or self.link
        return (link.gather_ratio, link.scatter_ratio) if link is not None else (1.0, 1.0)

    def busbw(self, nbytes: float) -> float:
        """The ring's bus bandwidth for messages of `nbytes`: this machine's, and across machines
        the slower of it and the network's."""
        measured = self.link.busbw_for(nbytes) if self.link else math.inf
        if self.network is not None:
            return min(measured, self.network.busbw_for(nbytes))
        return min(measured, self.network_busbw) if self.network_busbw else measured


def threads_needed(world_sizes: list[int], machine: Machine, device_type: str) -> list[int]:
    """The thread counts whose step time the predictions need, largest first."""
    if device_type == "cuda":
        return [max(1, machine.cores // max(1, machine.nproc_per_node))]
    return sorted({max(1, machine.cores // min(n, machine.nproc_per_node)) for n in [1, *world_sizes]},
                  reverse=True)


def scenario(n: int, machine: Machine, link: Optional[Link], device_type: str,
             network: Optional[Link] = None) -> Scenario:
    """Where `n` processes run: `nproc_per_node` on each `machine`. Across
    machines the ring is as slow as the slower of this machine's link and the network: the
    `network` measured between the hosts where there is one, else the nominal --link-gbps and
    --link-latency-us."""
    per_node = min(n, machine.nproc_per_node)
    nodes = math.ceil(n / per_node)
    threads = max(1, machine.cores // (machine.nproc_per_node if device_type == "cuda" else per_node))
    alpha = link.alpha_s if link else 0.0
    nominal = None
    if nodes > 1:
        nominal = machine.link_gbps * 1e9 / 8
        alpha = max(alpha, network.alpha_s if network else machine.link_latency_s)
    crowded = per_node / machine.cores if device_type != "cuda" and per_node > machine.cores else 1.0
    return Scenario(n, per_node, nodes, threads, alpha, link, nominal, crowded,
                    network.fitted() if network is not None and nodes > 1 else None)


def compute_at(probe: Probe, threads: int, oversubscription: float = 1.0) -> Compute:
    """The probe's step at `threads` (the nearest thread count measured), stretched when
    processes outnumber cores."""
    nearest = threads if threads in probe.compute else min(probe.compute, key=lambda t: abs(t - threads))
    c = probe.compute[nearest]
    k = oversubscription
    return Compute(c.step_s * k, c.data_s * k, c.fb_s * k, c.optimizer_s * k, c.copies)


def one_process_threads(probe: Probe, machine: Machine) -> int:
    return machine.cores if probe.device_type != "cuda" else max(probe.compute)


def baseline_step(probe: Probe, machine: Machine) -> float:
    """One process with every core: the step every speedup is measured against."""
    return compute_at(probe, one_process_threads(probe, machine)).step_s
