"""Which cost terms each parallelism contributes to a cluster plan's step, declared by its
module here and registered: `costs/NAME.py` ends with `register(ClusterCostTerms("NAME",
enabled=..., ...))`, NAME as in `scaletrain.parallel.PARALLELISMS`; `costs/__init__.py`
imports every module, so that importing the package registers them all. The step
(`cluster/step.py`) asks this registry, never a module by name — the same shape as the local
planner's `plan/costs/registry.py`.

A parallelism's cluster costs, each optional:

    per_layer(parts) -> {name: seconds}     what it adds on the critical path per layer and
                                            micro-batch (tensor parallel's collectives, context
                                            parallel's ring; expert parallel's all-to-all)
    schedule(parts, rank_s, compute_s) -> Schedule   how a step's micro-batches run on the ranks
                                            (the pipeline's; one at most)
    per_step(parts, schedule) -> {name: seconds}  communication once per step or micro-batch
                                            beyond the layers' (data parallel's); keys ending in
                                            `_exposed_s` are on the critical path
    memory(parts) -> {part: bytes}          bytes per GPU it adds at the peak
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Schedule:
    """A step's micro-batches on the pipeline's ranks (or the one rank)."""
    seconds: float
    """The step's micro-batches, bubble included, from the first forward to the last backward."""
    bubble_s: float = 0.0
    compute_s: float = 0.0
    """Of that, the busiest rank's own computation."""
    comm: tuple = ()
    """(name, seconds) of what the schedule sends (a pipeline's transfers)."""


@dataclass(frozen=True)
class ClusterCostTerms:
    parallelism: str
    enabled: Callable
    """(ClusterConfig) -> bool."""
    per_layer: Optional[Callable] = None
    schedule: Optional[Callable] = None
    per_step: Optional[Callable] = None
    memory: Optional[Callable] = None


_REGISTERED: dict[str, ClusterCostTerms] = {}


def register(costs: ClusterCostTerms) -> ClusterCostTerms:
    _REGISTERED[costs.parallelism] = costs
    return costs


def enabled(config) -> list[ClusterCostTerms]:
    """The cost terms of the parallelisms `config` enables, in the order they were registered."""
    return [c for c in _REGISTERED.values() if c.enabled(config)]


def registered() -> list[str]:
    return list(_REGISTERED)
