"""The planner: a request in (`PlanRequest`), a `Plan` out.

Machines like this one are measured (measurements.py: in rounds, from a cache, in someone else's
round, or recorded before) and every configuration asked for is predicted from each round's
measurements (predict.py: its ParallelConfig's step, composed from its parallelisms' cost
terms), the figures and their intervals the medians over the rounds; or, asked to choose, every
configuration worth trying on one world size is predicted and the fastest that fits chosen
(choose.py). A GPU cluster the user has not got (`ClusterRequest`) is planned from a hardware
profile by `scaletrain.plan.cluster`, nothing measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from ..foundation.errors import UsageError, arg
from ..strategies import REGISTRY
from . import measurements
from .choose import choose
from .constraints import check_candidates, constraints_of, left_out_notes
from .costs import NoCost
from .predict import Prediction, predict
from .report import worked_out
from .request import PlanRequest
from .result import Plan
from .summary import expected_error, median_predictions, median_probe, step_spreads
from .verdict import error_line, fit_advice, verdicts

if TYPE_CHECKING:
    from .cluster import ClusterPlan, ClusterRequest

#: The presets whose predictions decide when a choice's measurement is precise enough: data
#: parallel, replicated and sharded, on every process and on one.
_CHOICE_ERROR_STRATEGIES = ("ddp", "fsdp")


def make_plan(request: PlanRequest | "ClusterRequest", say: Callable[[str], None] = print) -> Plan | "ClusterPlan":
    """The plan `request` asks for; `say` gets the progress lines of its measurement. A
    `ClusterRequest` (GPUs of a hardware profile, nothing measured) is planned by
    `scaletrain.plan.cluster`."""
    if not isinstance(request, PlanRequest):
        from .cluster import plan_cluster

        return plan_cluster(request)
    from ..process.devices import choose_device
    from ..memory.steady import pass_on

    pass_on(request.measuring.steady_memory)  # every process the plan starts keeps its memory steady too
    device_type = choose_device(request.measuring.device, 0).type
    if request.measuring.one_round is None:  # (a round of a measurement under way was checked when it began)
        _check(request)
    if request.candidates.choose is not None:
        return _choice(request, device_type, say)
    return _predictions(request, device_type, say)


def _check(request: PlanRequest) -> None:
    """Every strategy asked for can be planned, and the model and data build (a broken factory
    fails here, in one line, before anything runs)."""
    from ..workloads import get_workload

    for name, _, _ in request.candidates.each():
        if not REGISTRY[name].plannable:
            raise UsageError(f"{arg('strategy', name)}: {REGISTRY[name].help.split(';')[0]}, decided when the model "
                             "is known, so it has no prediction of its own; plan ddp,fsdp instead")
    t = request.training
    workload = get_workload(t.workload, t.model, t.dataset, t.seq_len)
    if t.model:
        workload.build_model()
    if t.dataset:
        workload.build_datasets(t.seed)
    cp = request.candidates.options.get("cp")
    if cp:  # sequences train could not split (none, or not into 2·cp chunks): refused as train refuses them
        workload.check_context_parallel(cp)
    check_candidates(request, workload)


def _predict(probe, name: str, n: int, machine, options: dict) -> Optional[Prediction]:
    try:
        return predict(probe, name, n, machine, options)
    except NoCost as missing:
        raise UsageError(f"{arg('strategy', name)} on {n} process(es) enables {missing.parallelism}, which the planner "
                         f"has no cost terms for (scaletrain/plan/costs/{missing.parallelism}.py): it cannot be "
                         "predicted") from None


def _each_round(request: PlanRequest, probes: list) -> list[list[Prediction]]:
    machine = request.machine
    return [[p for name, n, options in request.candidates.each()
             if (p := _predict(probe, name, n, machine, options)) is not None] for probe in probes]


def memory_note(request: PlanRequest, device_type: str) -> list[str]:
    """What a CPU budget's figures mean without --steady-memory."""
    if device_type == "cuda" or not request.memory_budget_given or request.measuring.steady_memory:
        return []
    return ["Memory is predicted as a process holds it; without --steady-memory glibc's heap keeps freed tensors, and "
            "a CPU process's resident peak runs 10-20% above that: give --steady-memory here and to train when the "
            "budget is tight."]


def _predictions(request: PlanRequest, device_type: str, say: Callable[[str], None]) -> Plan:
    m = request.measuring

    def error_of(probes: list) -> Optional[float]:
        return expected_error(median_predictions(_each_round(request, probes))[1])

    measured = measurements.measured(request, device_type, error_of, say)
    probes = measured.probes
    all_disturbed = not probes
    if all_disturbed:  # what the disturbed rounds measured, said to be no answer
        probes = measured.disturbed
    by_round = _each_round(request, probes)
    predictions, spreads = median_predictions(by_round)
    error = expected_error(spreads)
    told = error is not None and error <= m.max_error and not all_disturbed
    probe = median_probe(probes)
    machine = request.machine
    shapes = request.candidates.options
    conclusions = ([f"Every round was disturbed: other processes kept more than --max-other-load "
                    f"{m.max_other_load:g} cores busy during all {len(measured.left_out)} of them."]
                   if all_disturbed else []) + \
        verdicts(predictions, machine.device_memory_bytes, probe=probe,
                 noise=None if told else (error, len(probes), m.max_error)) + \
        fit_advice(probe, predictions, machine, shapes) + memory_note(request, device_type) + \
        left_out_notes(request) + [error_line(error, len(probes))]
    return Plan(machine, measured, probes, probe, predictions, spreads, by_round, error, m.max_error, told,
                conclusions, max_other_load=m.max_other_load, step_spreads=step_spreads(probes),
                worked_out=worked_out(probe, predictions))


def _choice(request: PlanRequest, device_type: str, say: Callable[[str], None]) -> Plan:
    world, machine = request.candidates.choose, request.machine

    def error_of(probes: list) -> Optional[float]:
        plain = [[p for name in _CHOICE_ERROR_STRATEGIES for n in sorted({1, world})
                  if (p := predict(probe, name, n, machine)) is not None] for probe in probes]
        return expected_error(median_predictions(plain)[1])

    measured = measurements.measured(request, device_type, error_of, say)
    chosen = choose(measured.probes, world, request.training.batch_size, machine, constraints_of(request.candidates),
                    across_hosts=request.measuring.hosts is not None)
    return Plan(machine, measured, measured.probes, choice=chosen, world_size=world,
                conclusions=memory_note(request, device_type), max_other_load=request.measuring.max_other_load)
