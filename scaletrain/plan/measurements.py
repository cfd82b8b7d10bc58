"""The measurements a plan rests on (`measured`): recorded ones taken as they are; one round
measured into someone else's folder (a bench's round); those cached for this model, batch,
world and machine (a choice: a second one is made at once); or rounds measured now, as bench
measures its own (measure/rounds.py) — in alternating order, a round during which other
processes kept cores busy left out and run again, more rounds while the predictions'
intervals are wider than the bound and the budget allows.

A busy machine can make the probe's figures nonsense — one process measured at 483 ms a step
with an interval of 19–3,695 ms, two processes predicted at 4.44× on 2 cores. Rounds it
disturbed are left out; what is still too noisy after the budget is said to be so (`told`
false), never turned into an answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..foundation.errors import UsageError, arg
from ..launchers.interrupts import Stopped, signal_name
from ..measure.rounds import Job, Limits, run_rounds
from ..memory.allocator import ALLOCATOR_VAR
from .jobs import ProbeJobs, probe_plan
from .probe import Probe, probe_from_dict, probe_problem
from .probe_link import load_comm_json
from .request import PlanRequest

PROBE_KEY = "plan's measurements"


@dataclass
class Measured:
    probes: list
    """The probes of the rounds kept."""
    disturbed: list = field(default_factory=list)
    """The probes of the rounds left out (what a plan falls back on, saying it cannot tell)."""
    left_out: list = field(default_factory=list)
    """[{"round", "job", "other_cores"}, ...]: rounds disturbed by other processes, measured again."""
    stop_reason: str = ""
    stopped: Optional[Stopped] = None
    """The signal that ended the measuring early, if one did: the rounds finished stand."""


def _probe_line(result: dict) -> str:
    probe = result["probe"]
    steps = ", ".join(f"{c.copies} × {t} thread(s) {c.step_s * 1e3:.1f} ms"
                      for t, c in sorted(probe.compute.items(), reverse=True))
    return f"step without communication: {steps}"


def jobs_for(request: PlanRequest, device_type: str) -> ProbeJobs:
    """What each round measures for the request's world sizes."""
    m = request.measuring
    # A choice takes the all-reduce from its own probe jobs (their measurements are cached).
    link = load_comm_json(m.comm) if m.comm is not None and request.candidates.choose is None else None
    return probe_plan(request.training.name, request.spec(), request.candidates.sizes, request.machine,
                      device_type, link, m.hosts)


def measured(request: PlanRequest, device_type: str, error_of: Callable[[list], Optional[float]],
             say: Callable[[str], None]) -> Measured:
    m = request.measuring
    if m.recorded is not None:
        return Measured([p if isinstance(p, Probe) else probe_from_dict(p) for p in m.recorded])
    jobs = jobs_for(request, device_type)
    if m.one_round is not None:
        return Measured([jobs.run_round(m.one_round.folder, reverse=m.one_round.reverse)])
    if not m.cached:
        return _rounds(jobs, m, error_of, say)
    key = cache_key(request, device_type)
    probes = cached_probes(key, say)
    if probes:
        say(f"scaletrain: using the measurements made earlier for this model, batch and machine (cache {key})")
        return Measured(probes)
    say(f"scaletrain: measuring {request.training.name} for a choice ({m.rounds} round(s))")
    found = _rounds(jobs, m, error_of, say=lambda text: say(text) if text.startswith("  round") and
                    "left out" in text else None)
    if found.stopped is not None:
        raise Stopped(found.stopped.signum)
    if not found.probes:
        raise UsageError(f"no round of the measurement could be kept: other processes kept more than "
                         f"{arg('max_other_load', m.max_other_load)} cores busy during all of them; choose when the "
                         "machine is quieter")
    if found.left_out:
        say(f"scaletrain: {len(found.left_out)} round(s) left out and measured again: other processes kept the "
            "machine busy")
    store_probes(key, found.probes)
    return found


def _rounds(jobs: ProbeJobs, m, error_of: Callable[[list], Optional[float]], say: Callable[[str], None]) -> Measured:
    """Rounds of `jobs`: at least `m.rounds` kept (2 where only one was asked and it is not
    decided), more while `error_of(probes)` exceeds `m.max_error` and another round fits
    `m.budget_s`; those finished kept when a signal (Ctrl-C, SIGTERM, SIGHUP) ends them early."""
    every: list = []  # every round's probe, the disturbed ones too

    def run(folder: Path, index: int) -> dict:
        result = {"probe": jobs.run_round(folder, reverse=index % 2 == 1)}
        every.append(result["probe"])
        return result

    def decided(results: dict) -> bool:
        error = error_of([r["probe"] for r in results[PROBE_KEY]])
        return error is not None and error <= m.max_error

    limits = Limits(budget_s=m.budget_s, min_rounds=m.rounds, max_other_cores=m.max_other_load,
                    fixed_rounds=m.rounds if m.rounds == 1 else None)
    with tempfile.TemporaryDirectory(prefix="scaletrain-plan-") as tmp:
        rounds = run_rounds([Job(PROBE_KEY, run, _probe_line)], Path(tmp), limits, decided, say)
    probes = [r["probe"] for r in rounds.results[PROBE_KEY]]
    stopped = Stopped(rounds.stopped_by) if rounds.stopped_by is not None else None
    if stopped is not None and not probes:
        # An outcome, not progress: on stderr whatever `say` does with progress lines.
        print(f"scaletrain: {m.subject} stopped by {signal_name(stopped.signum)} before its first probe round was "
              f"complete; {'nothing was predicted' if m.subject == 'plan' else 'nothing was chosen or trained'}",
              file=sys.stderr, flush=True)
        raise Stopped(stopped.signum, said=True)
    kept = {id(p) for p in probes}
    return Measured(probes, [p for p in every if id(p) not in kept], rounds.left_out, rounds.stop_reason, stopped)


# -- the cache of a choice's probes ---------------------------------------------------------

def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "scaletrain" / "probes"


def cache_key(request: PlanRequest, device_type: str) -> str:
    """The model (workload, factories), batch, world and machine (and the --hosts measured
    across) a probe is valid for."""
    import torch

    from ..memory.steady import wanted
    from ..version import __version__

    spec, machine, hosts = request.spec(), request.machine, request.measuring.hosts
    facts = {k: spec.get(k) for k in ("workload", "model", "dataset", "batch_size", "seed", "device", "backend")}
    if spec.get("seq_len") is not None:  # (absent otherwise: the probes cached before it stay valid)
        facts["seq_len"] = spec["seq_len"]
    facts.update(world_size=request.candidates.choose, nproc_per_node=machine.nproc_per_node,
                 device_type=device_type, cores=machine.cores, host=platform.node(),
                 hosts=hosts.names if hosts else "", torch=torch.__version__, scaletrain=__version__, cwd=os.getcwd(),
                 # How the processes hold memory changes their speed (--steady-memory costs 8-40%) and peaks.
                 steady_memory=bool(request.measuring.steady_memory or wanted(None)),
                 allocator=os.environ.get(ALLOCATOR_VAR, ""))  # the probe's memory is its allocator's
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


def cached_probes(key: str, say: Optional[Callable[[str], None]] = None) -> Optional[list[Probe]]:
    """The probes cached under `key`, or None: none cached, or figures no measurement gives
    (a file edited or damaged), which are measured again rather than believed."""
    path = cache_dir() / f"{key}.json"
    try:
        docs = json.loads(path.read_text())["probes"]
        problem = next((found for found in map(probe_problem, docs) if found), None)
        if problem is None:
            return [probe_from_dict(doc) for doc in docs] or None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if say is not None:
        say(f"scaletrain: note: the cached measurements in {path} cannot be right ({problem}); measuring again")
    return None


def store_probes(key: str, probes: list[Probe]) -> None:
    from ..foundation.safe_files import write_json_atomic

    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache_dir() / f"{key}.json", {"probes": [p.as_dict() for p in probes]})
    except OSError:
        pass  # a cache that cannot be written only costs the next run its measurement
