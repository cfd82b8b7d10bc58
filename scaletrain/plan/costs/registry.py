"""Which cost terms each parallelism contributes, declared by its cost module and registered
here: `costs/NAME.py` ends with `register(CostTerms("NAME", terms=terms, ...))`, naming the
functions it has; `costs/__init__.py` imports every cost module, so that importing anything of
this package registers them all. The composers (`step.py`, `memory.py`, `choose.py`) ask this
registry, never a module by name.

A parallelism of `scaletrain.parallel.PARALLELISMS` with nothing registered has no cost:
`NoCost`, which the planner turns into one line, never a silent omission."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ...parallel import PARALLELISMS
from ...parallel.config import ParallelConfig


@dataclass(frozen=True)
class CostTerms:
    """What one parallelism answers about a step; every function is optional (None: it has
    nothing to say on that), see `step.py` for how they compose."""
    parallelism: str
    """Its name in PARALLELISMS."""
    distributes: bool = True
    """False where it changes how one process computes, not how the processes share the work:
    a configuration enabling only such is a lone process's measured step."""
    runs: Optional[Callable] = None
    """(probe, config) -> bool: whether the model can run so (a tensor-parallel plan)."""
    stages: Optional[Callable] = None
    """(probe, config) -> groups | None: the units of each pipeline stage (None: cannot cut)."""
    held_share: Optional[Callable] = None
    """(probe, config, units) -> float: the share of those units' parameters a process holds."""
    state_divisor: Optional[Callable] = None
    """(config) -> int: how many ways the training state is sharded."""
    token_share: Optional[Callable] = None
    """(config) -> float: the share of each sequence's tokens a process computes."""
    schedule: Optional[Callable] = None
    """(step) -> Terms | None: how the step's computation runs, when not as one piece."""
    terms: Optional[Callable] = None
    """(step) -> Terms: what it adds to the step."""
    memory_bytes: Optional[Callable] = None
    """(step) -> float: the peak, where it is not the composition's."""
    in_flight: Optional[Callable] = None
    """(config, stage, batch) -> (samples, micro-batch): the activations a stage keeps at once."""
    activation_share: Optional[Callable] = None
    """(tp_share) -> float: the share of each sample's activations a process keeps."""
    kept_activation_bytes: Optional[Callable] = None
    """(probe, config, units, share, samples, micro-batch) -> bytes | None: what forward keeps."""
    transient_bytes: Optional[Callable] = None
    """(probe, config, held, largest unit, largest tensor, shards) -> bytes at the peak."""
    candidates: Optional[Callable] = None
    """(world, batch, blocks, tensor_parallel, sequence) -> [(strategy, options)] for --choose."""
    variants: Optional[Callable] = None
    """() -> [options]: each candidate again with each of these (checkpointing's modes)."""


class NoCost(Exception):
    """A configuration enables a parallelism the planner has no cost terms for."""

    def __init__(self, parallelism: str):
        super().__init__(parallelism)
        self.parallelism = parallelism


_REGISTERED: dict[str, CostTerms] = {}


def register(costs: CostTerms) -> CostTerms:
    _REGISTERED[costs.parallelism] = costs
    return costs


def cost_terms(parallelism: str) -> CostTerms:
    """The cost terms of the parallelism named `parallelism` (NoCost where none is registered)."""
    try:
        return _REGISTERED[parallelism]
    except KeyError:
        raise NoCost(parallelism) from None


def enabled(config: ParallelConfig) -> list[CostTerms]:
    """The cost terms of the parallelisms `config` enables, in the order they are applied."""
    return [cost_terms(p.name) for p in PARALLELISMS if p.enabled(config)]


def every() -> list[CostTerms]:
    """The cost terms of every parallelism, in the order they are applied (NoCost where one has none)."""
    return [cost_terms(p.name) for p in PARALLELISMS]


def first(costs: list[CostTerms], answer: str) -> Optional[Callable]:
    """The function of the first of `costs` that gives `answer` (one of CostTerms' fields)."""
    return next((getattr(c, answer) for c in costs if getattr(c, answer) is not None), None)


def token_share(costs: list[CostTerms], config: ParallelConfig) -> float:
    """The share of each sequence's tokens a process computes, by the parallelisms that split
    them (context parallel's 1/cp)."""
    share = 1.0
    for c in costs:
        if c.token_share is not None:
            share *= c.token_share(config)
    return share
