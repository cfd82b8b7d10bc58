"""Which cost terms each parallelism contributes, declared by its cost module and registered
here: `costs/NAME.py` ends with `register(CostTerms("NAME", terms=terms, ...))`, naming the
functions it has; `costs/__init__.py` imports every cost module, so that importing anything of
this package registers them all. The composers (`step.py`, `memory.py`, `choose.py`) ask this
registry, never a module by name.

A parallelism of `scaletrain.parallel.PARALLELISMS` with nothing registered has no cost:
`NoCost`, which the planner turns into one line, never a silent omission."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

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
    measure_alone: Optional[Callable] = None
    """(ProbeContext) -> dict (JSON): what its terms need measured in the probe's job of one
    process ({}: nothing for this model)."""
    measure_job: Optional[Callable] = None
    """(ProbeContext) -> dict (JSON): the same in the probe's job of several processes. Both
    reach its terms as `probe.facts[parallelism]`: {"alone": ..., "job": ...}."""


@dataclass(frozen=True)
class ProbeContext:
    """What a probe job hands a parallelism's measurements: the model as the job prepared it
    (unwrapped), its workload, an endless iterator of batches, the loss, the job's `Run`, and
    how many steps to time after how many of warm-up."""
    module: Any
    workload: Any
    batches: Any
    loss_fn: Any
    run: Any
    steps: int
    warmup: int


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


def measured(hook: str, context: ProbeContext) -> dict:
    """{parallelism: what it measured} by every parallelism with the `hook` measurement
    ("measure_alone" or "measure_job"), leaving out those with nothing to measure."""
    found = {}
    for costs in _REGISTERED.values():
        measure = getattr(costs, hook)
        if measure is not None and (facts := measure(context)):
            found[costs.parallelism] = facts
    return found


def token_share(costs: list[CostTerms], config: ParallelConfig) -> float:
    """The share of each sequence's tokens a process computes, by the parallelisms that split
    them (context parallel's 1/cp)."""
    share = 1.0
    for c in costs:
        if c.token_share is not None:
            share *= c.token_share(config)
    return share
