"""A plan's rounds of measurement, as bench measures its own (bench/rounds.py): in alternating
order, a round during which other processes kept cores busy left out and run again, more
rounds while the predictions' intervals are wider than the bound and the budget allows.

A busy machine can make the probe's figures nonsense — one process measured at 483 ms a step
with an interval of 19–3,695 ms, two processes predicted at 4.44× on 2 cores. Rounds it
disturbed are left out; what is still too noisy after the budget is said to be so
(`told` false), never turned into an answer.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from ..bench.orchestrate import PROBE_KEY, probe_job
from ..bench.rounds import Limits, run_rounds
from ..launchers.interrupts import Stopped, signal_name


@dataclass
class PlanRounds:
    probes: list
    """The probes of the rounds kept."""
    disturbed: list = field(default_factory=list)
    """The probes of the rounds left out (what a plan falls back on, saying it cannot tell)."""
    left_out: list = field(default_factory=list)
    """[{"round", "job", "other_cores"}, ...]: rounds disturbed by other processes, measured again."""
    stop_reason: str = ""
    stopped: Optional[Stopped] = None
    """The signal that ended the measuring early, if one did: the rounds finished stand."""


def measure(probe_jobs, min_rounds: int, budget_s: float, max_other_cores: float,
            error_of: Callable[[list], Optional[float]], max_error: float,
            say: Callable[[str], None], what: str = "plan") -> PlanRounds:
    """Rounds of `probe_jobs` (make.ProbeJobs): at least `min_rounds` kept (2 where only one
    was asked and it is not decided), more while `error_of(probes)` exceeds `max_error` and
    another round fits `budget_s`. `what` is measuring, for the user ("plan")."""
    every: list = []  # every round's probe, the disturbed ones too
    job = probe_job(probe_jobs)  # bench's own job for the plan's measurements

    def run(folder: Path, index: int) -> dict:
        result = job.run(folder, index)
        every.append(result["probe"])
        return result

    def decided(results: dict) -> bool:
        probes = [r["probe"] for r in results[PROBE_KEY]]
        error = error_of(probes)
        return error is not None and error <= max_error

    limits = Limits(budget_s=budget_s, min_rounds=min_rounds, max_other_cores=max_other_cores,
                    fixed_rounds=min_rounds if min_rounds == 1 else None)
    with tempfile.TemporaryDirectory(prefix="scaletrain-plan-") as tmp:
        rounds = run_rounds([replace(job, run=run)], Path(tmp), limits, decided, say)
    probes = [r["probe"] for r in rounds.results[PROBE_KEY]]
    stopped = Stopped(rounds.stopped_by) if rounds.stopped_by is not None else None
    if stopped is not None and not probes:
        # An outcome, not progress: on stderr whatever `say` does with progress lines.
        print(f"scaletrain: {what} stopped by {signal_name(stopped.signum)} before its first probe round was "
              f"complete; {'nothing was predicted' if what == 'plan' else 'nothing was chosen or trained'}",
              file=sys.stderr, flush=True)
        raise Stopped(stopped.signum, said=True)
    kept = {id(p) for p in probes}
    return PlanRounds(probes, [p for p in every if id(p) not in kept], rounds.left_out, rounds.stop_reason, stopped)
