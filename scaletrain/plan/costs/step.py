"""One step of one process of a configuration, composed from the cost terms of the
parallelisms the configuration enables — never from a strategy's name.

Each parallelism of `scaletrain.parallel.PARALLELISMS` has its cost module here, named as the
parallelism (`tensor_parallel.py` for `TensorParallel`, whose `name` is "tensor_parallel").
A module answers what it knows, through the functions it registers (`registry.CostTerms`,
each optional):

    runs(probe, config) -> bool                 whether the model can run so (a tensor-parallel plan)
    stages(probe, config) -> groups | None      the units of each pipeline stage (None: cannot cut)
    held_share(probe, config, units) -> float   the share of those units' parameters a process holds
    state_divisor(config) -> int                how many ways the training state is sharded
    token_share(config) -> float                the share of each sequence's tokens a process computes
    schedule(step) -> Terms | None              how the step's computation runs, when not as one piece
    terms(step) -> Terms                        what it adds to the step
    memory_bytes(step) -> float | None          the peak, where it is not the composition's

A module registered with `distributes=False` changes how one process computes, not how the
processes share the work: a configuration enabling only such is a lone process's measured step.

The composition (`step_cost`): the process's share of the model from the stages and held
shares; the schedule's terms (the one module that schedules the step, else the measured step
less the work other processes take); every other module's terms added; the peak memory from
`memory.stage_peak`. A configuration enabling a parallelism with no cost module has no cost:
`registry.NoCost`, which the planner turns into one line, never a silent omission.
"""

from __future__ import annotations

import math
from typing import Optional

from ...parallel.config import ParallelConfig
from ..machine import Machine
from ..probe import MeshStep, Probe
from ..scenario import Scenario, compute_at, one_process_threads, scenario
from .memory import peak_bytes, stage_peak
from .registry import enabled, first, token_share
from .terms import Step, StepCost, Terms, composed


def one_piece(step: Step) -> Terms:
    """The step as the probe measured it, less the shares of forward + backward and of the
    optimizer step that other processes take (the whole step when they take none)."""
    c = step.compute
    return Terms(compute_s=c.step_s - c.fb_s * (1 - step.work_share) - c.optimizer_s * (1 - step.state_share))


def step_cost(probe: Probe, s: Scenario, machine: Machine, config: ParallelConfig,
              machinery: bool = True) -> Optional[StepCost]:
    """The step of `config` on the processes `s` describes, or None where the configuration
    cannot run the model (more stages than units, no tensor-parallel plan). NoCost where a
    parallelism it enables has no cost module."""
    costs = enabled(config)
    if not any(c.distributes for c in costs):
        # Nothing distributed: a lone process's measured step with every core, the whole model.
        c = compute_at(probe, one_process_threads(probe, machine))
        return StepCost(c.step_s, 0.0, 0.0, probe.batch_size, peak_bytes(probe, config))
    fp = probe.footprint
    if not all(c.runs(probe, config) for c in costs if c.runs is not None):
        return None
    units = list(range(len(fp.block_param_bytes)))
    cut = first(costs, "stages")
    groups = cut(probe, config) if cut is not None else [units]
    if groups is None:
        return None  # more stages than the model has units
    shares = [c.held_share for c in costs if c.held_share is not None]

    def held_share(these: list) -> float:
        share = 1.0
        for one in shares:
            share *= one(probe, config, these)
        return share

    divisor = 1
    for c in costs:
        if c.state_divisor is not None:
            divisor *= c.state_divisor(config)
    # The heaviest stage sets the pace; a process holds its share of it.
    stage = max(groups, key=lambda g: sum(fp.block_param_bytes[i] for i in g))
    stage_fraction = sum(fp.block_param_bytes[i] for i in stage) / max(1, fp.param_bytes)
    tp_share = held_share(stage)
    step = Step(probe, s, machine, config, compute_at(probe, s.threads, s.oversubscription), groups, stage,
                stage_fraction, held_share, tp_share, stage_fraction * tp_share / divisor, machinery,
                token_share(costs, config))
    scheduler = first(costs, "schedule")
    schedule = scheduler(step) if scheduler is not None else one_piece(step)
    if schedule is None:
        return None  # the schedule cannot cut the model so (fewer units than devices)
    terms = [c.terms(step) for c in costs if c.terms is not None]
    peak = first(costs, "memory_bytes")
    memory = peak(step) if peak is not None else None
    return composed(schedule, terms, probe.batch_size * config.dims.dp_size,
                    stage_peak(step) if memory is None else memory)


def beyond_the_model(probe: Probe, measured: MeshStep, config: ParallelConfig) -> Optional[float]:
    """What `measured` (a step of `config` across a probe job's processes) took beyond this cost
    model's prediction of it without the measured terms, per process of a core of its own:
    measured on more processes than cores (a one-core machine's job), the machinery's time is
    stretched as the arithmetic's is, and the configurations stretch it again by theirs. None
    where the model cannot predict that step."""
    per_node = measured.nproc_per_node or measured.world_size
    here = Machine(nproc_per_node=per_node, cores=probe.cores, link_gbps=0.0, link_latency_s=0.0,
                   overlap=0.0 if probe.device_type != "cuda" else 1.0, device_memory_bytes=math.inf)
    s = scenario(measured.world_size, here, probe.link, probe.device_type, probe.network)
    cost = step_cost(probe, s, here, config, machinery=False)
    if cost is None:
        return None
    return max(0.0, measured.step_s - (cost.compute_s + cost.exposed_s)) / s.oversubscription
