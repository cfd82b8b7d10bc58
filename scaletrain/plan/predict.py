"""Predictions per strategy and world size: the configuration a strategy runs (its
ParallelConfig), its step composed from its parallelisms' cost terms (costs/) on a round of
measurements (Probe) where the processes would run (scenario), and the speedup against one
process with every core."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from . import formulas as f
from .configuration import configuration, options_for
from .costs.step import step_cost
from .machine import Machine
from .probe import Probe
from .scenario import baseline_step, scenario


@dataclass
class Prediction:
    strategy: str
    world_size: int
    nodes: int
    threads: int
    global_batch: int
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    step_s: float
    samples_per_s: float
    speedup: float
    efficiency: float
    memory_bytes: float
    fits: bool
    note: str = ""
    mesh: str = ""
    """The parallel dimensions it runs ('dp_shard 2 × tp 2')."""
    options: dict = field(default_factory=dict)
    """The strategy options it was predicted with."""

    def as_dict(self) -> dict:
        return asdict(self)


def predict(probe: Probe, strategy: str, n: int, machine: Machine,
            strategy_options: Optional[dict] = None) -> Optional[Prediction]:
    """The prediction for `strategy` (with `strategy_options`: degrees, micro-batches, ...) on
    `n` processes, or None where it cannot run (an unknown strategy, degrees that do not fit,
    more stages than the model has units). costs.NoCost where a parallelism it enables has no
    cost terms."""
    shape = configuration(strategy, n, strategy_options)
    if shape is None:
        return None
    s = scenario(n, machine, probe.link, probe.device_type, probe.network)
    cost = step_cost(probe, s, machine, shape)
    if cost is None:
        return None
    step = cost.compute_s + cost.exposed_s
    gain = f.speedup(step, cost.batch, baseline_step(probe, machine), probe.batch_size)
    return Prediction(strategy=strategy, world_size=n, nodes=s.nodes, threads=s.threads, global_batch=cost.batch,
                      compute_s=cost.compute_s, comm_s=cost.comm_s, exposed_comm_s=cost.exposed_s, step_s=step,
                      samples_per_s=cost.batch / step, speedup=gain, efficiency=gain / n,
                      memory_bytes=cost.memory_bytes, fits=cost.memory_bytes <= machine.device_memory_bytes,
                      note=cost.note, mesh=shape.dims.describe(), options=options_for(strategy, strategy_options or {}))


def predict_all(probe: Probe, strategies: list[str], world_sizes: list[int], machine: Machine,
                strategy_options: Optional[dict] = None) -> list[Prediction]:
    return [p for name in strategies for n in world_sizes
            if (p := predict(probe, name, n, machine, strategy_options)) is not None]
