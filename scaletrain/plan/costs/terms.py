"""What a parallelism adds to one step of one process, as typed values.

Each parallelism's cost module (a module of this package named as the parallelism) turns a
round of measurements (`Probe`), where the processes run (`Scenario`) and the configuration
(`ParallelConfig`) into `Terms`: seconds of computation on the critical path, of communication
(and how much of it is not hidden behind computation), of waiting in a schedule's bubble, a
note. The step (`StepCost`) is their sum; its memory is the sum of `MemoryParts`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Optional

from ...parallel.config import ParallelConfig
from ..machine import Machine
from ..probe import Compute, Probe
from ..scenario import Scenario


@dataclass(frozen=True)
class Terms:
    """One parallelism's share of a step, in seconds."""
    compute_s: float = 0.0
    """Work on the critical path (negative where the parallelism takes work off this process)."""
    comm_s: float = 0.0
    """Communication it sends."""
    exposed_s: float = 0.0
    """Of that, what no computation hides."""
    bubble_s: float = 0.0
    """Time its schedule keeps this process waiting (a pipeline's fill and drain)."""
    note: str = ""


@dataclass(frozen=True)
class MemoryParts:
    """The parts of a process's peak, in bytes (before the allocator's slack)."""
    constant: float = 0.0
    """The interpreter, torch, the process group, the data: what a process holds before any model."""
    parameters: float = 0.0
    gradients: float = 0.0
    optimizer_state: float = 0.0
    activations: float = 0.0
    """What forward keeps for backward."""
    transient: float = 0.0
    """Tensors that live a moment at the peak: a gradient before its bucket, FSDP's gathered blocks."""

    def __getitem__(self, name: str) -> float:
        return getattr(self, name)

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class StepCost:
    """One step of one process of a configuration: the parallelisms' terms composed."""
    compute_s: float
    """Work and bubbles on the critical path."""
    comm_s: float
    exposed_s: float
    batch: int
    """Samples one step of the whole job trains on."""
    memory_bytes: float
    """The largest process's peak."""
    note: str = ""

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exposed_s


def composed(schedule: Terms, terms: list[Terms], batch: int, memory_bytes: float,
             exposed_s: Optional[float] = None) -> StepCost:
    """The step: the schedule's terms then every other parallelism's, added in order;
    `exposed_s`: a measured exposed communication that replaces the modelled one."""
    every = [schedule, *terms]
    compute = schedule.compute_s + schedule.bubble_s
    for t in terms:
        compute += t.compute_s + t.bubble_s
    note = "; ".join(t.note for t in every if t.note)
    return StepCost(compute_s=compute, comm_s=sum(t.comm_s for t in every),
                    exposed_s=sum(t.exposed_s for t in every) if exposed_s is None else exposed_s,
                    batch=batch, memory_bytes=memory_bytes, note=note)


@dataclass(frozen=True)
class Step:
    """What every cost module reads: the measurements, where the processes run, the
    configuration, and what this process holds and computes of the model."""
    probe: Probe
    s: Scenario
    machine: Machine
    config: ParallelConfig
    compute: Compute
    """The measured step at this process's threads, stretched where processes outnumber cores."""
    groups: list
    """The units of each stage (one group, every unit, where the model is not cut)."""
    stage: list
    """The heaviest stage's units: the one that sets the pace (and whose process this is)."""
    stage_fraction: float
    """That stage's share of the model's parameters."""
    held_share: Callable[[list], float]
    """The share of some units' parameters (and, roughly, of their arithmetic) one process holds."""
    tp_share: float
    """`held_share(stage)`."""
    state_share: float
    """The share of the whole model's parameters, gradients and optimizer state one process steps."""
    machinery: bool
    """False: without the terms measured as a whole step's excess over this model (they are
    worked out from this model's prediction of that step)."""
    token_share: float = 1.0
    """The share of each sequence's tokens one process computes (context parallel's 1/cp)."""

    @property
    def work_share(self) -> float:
        """The share of the stage's forward and backward one process computes: its share of the
        layers' arithmetic (tensor parallel's), of the tokens (context parallel's)."""
        return self.tp_share * self.token_share

    @property
    def held(self) -> float:
        """Bytes of parameters one process holds of its stage, before any sharding of the state."""
        return self.probe.footprint.param_bytes * self.stage_fraction * self.tp_share

    @property
    def microbatches(self) -> int:
        """Micro-batches a batch goes through the step in (a pipeline's; 1 otherwise)."""
        return self.config.microbatches if self.config.pipelined else 1
