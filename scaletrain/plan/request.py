"""What the planner is asked (`PlanRequest`): the model and data to train, the machines to run
on (machines like this one, `machine`; a GPU cluster the user has not got is a
`scaletrain.plan.cluster.ClusterRequest` instead), the
configurations to predict (or to choose among), and how to measure what the predictions rest
on. `scaletrain.plan.make_plan` takes it; the `plan` and `bench` commands and `train
--strategy auto` build it from their flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..foundation.defaults import (
    BENCH_MAX_OTHER_CORES,
    BENCH_MEASURE_S,
    PLAN_BUDGET_S,
    PLAN_MAX_ERROR,
    PLAN_PROBE_ROUNDS,
)
from .machine import Machine


@dataclass(frozen=True)
class Training:
    """The model and data, as names: the probe jobs build them again themselves."""
    workload: str = "synthetic-cnn"
    model: Optional[str] = None
    """Your model factory, `module:function`, in place of the workload's model."""
    dataset: Optional[str] = None
    batch_size: int = 32
    """Samples per process per step."""
    seed: int = 0
    seq_len: Optional[int] = None
    """Tokens per sequence of a language-model workload (None: its default)."""

    @property
    def name(self) -> str:
        """How the measurements name it: the workload, and the factories that replace its parts."""
        from ..workloads import get_workload

        return get_workload(self.workload, self.model, self.dataset, self.seq_len).name


@dataclass(frozen=True)
class Candidates:
    """The configurations to predict: each strategy on each world size, with the strategy
    options given (degrees, micro-batches: those each strategy takes), and those `listed`; or,
    with `choose`, every configuration worth trying on that one world size (plan/choose.py).
    The world sizes are also what the measurements are made for."""
    strategies: tuple = ()
    world_sizes: tuple = ()
    options: dict = field(default_factory=dict)
    choose: Optional[int] = None
    """Choose for this world size (None: predict the listed ones)."""
    listed: tuple = ()
    """(strategy, world size, options) each, predicted as they are (bench's configurations)."""

    def each(self) -> list[tuple[str, int, dict]]:
        """(strategy, world size, options) of every configuration predicted (not chosen among)."""
        return [*self.listed, *((name, n, self.options) for name in self.strategies for n in self.world_sizes)]

    @property
    def sizes(self) -> list[int]:
        """Every world size predicted for."""
        if self.choose is not None:
            return sorted({1, self.choose})  # one process too: the reference
        return sorted({*self.world_sizes, *(n for _, n, _ in self.listed)})


@dataclass(frozen=True)
class OneRound:
    """Measure one round into `folder` (a round of someone else's: bench's), the jobs in
    reverse order when `reverse`."""
    folder: Path
    reverse: bool = False


@dataclass(frozen=True)
class Measuring:
    """How the measurements the predictions rest on are made (or where they come from)."""
    device: Optional[str] = None
    backend: Optional[str] = None
    steps: int = 20
    """Measured steps per thread count at least."""
    warmup: int = 3
    min_seconds: float = BENCH_MEASURE_S
    rounds: int = PLAN_PROBE_ROUNDS
    """Rounds at least (alternating order); more while the expected error exceeds `max_error`."""
    budget_s: float = PLAN_BUDGET_S
    max_error: float = PLAN_MAX_ERROR
    max_other_load: float = BENCH_MAX_OTHER_CORES
    comm: Optional[Path] = None
    """`scaletrain comm --json` results to take the all-reduce from, instead of a probe."""
    hosts: Optional[Any] = None
    """measure.jobs.Hosts: measure across these machines."""
    microbatches: Optional[int] = None
    """The pipeline micro-batches to time blocks at (the smallest a prediction needs)."""
    steady_memory: bool = False
    """Whether the processes keep their memory steady (--steady-memory): what the memory figures mean."""
    one_round: Optional[OneRound] = None
    recorded: Optional[tuple] = None
    """Probes measured before (bench.json's, plan --json's): predicted from as they are."""
    cached: bool = False
    """Take (and keep) the measurements cached for this model, batch, world and machine."""
    subject: str = "plan"
    """What the measurement is called when it says it was stopped ("--strategy auto's measurement")."""

    @property
    def spec(self) -> dict:
        return {"device": self.device, "backend": self.backend, "steps": self.steps, "warmup": self.warmup,
                "min_seconds": self.min_seconds, "microbatches": self.microbatches}


@dataclass(frozen=True)
class PlanRequest:
    training: Training
    machine: Optional[Machine]
    """Machines like this one (processes, cores, memory, the link between them)."""
    candidates: Candidates
    measuring: Measuring = field(default_factory=Measuring)
    memory_budget_given: bool = False
    """The user gave each process's memory (--device-memory-gb): the conclusions say what a CPU
    budget's figures mean."""

    def spec(self) -> dict:
        """What every probe job measures, as names."""
        t = self.training
        return {"workload": t.workload, "model": t.model, "dataset": t.dataset, "batch_size": t.batch_size,
                "seed": t.seed, **({"seq_len": t.seq_len} if t.seq_len is not None else {}), **self.measuring.spec}
