"""Rounds of measurement until the answer is clear or the time budget is spent.

A round runs every job once (each configuration, and the plan's measurements when there are
predictions), in alternating order — forwards in odd rounds, backwards in even ones — so that
a slow drift of the machine's load hits every job alike. After each round the caller says
whether the verdict is decided; rounds go on while it is not and the next round still fits
in the budget (judged by the last round's duration).

A round during which other processes kept more than `max_other_cores` of the machine busy
(measure/machine_load) is left out and measured again: its figures say more about the other
job than about the configurations.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..foundation.defaults import BENCH_MAX_OTHER_CORES, BENCH_MAX_ROUNDS, BENCH_MIN_ROUNDS
from ..launchers.interrupts import Stopped, signal_name
from .machine_load import LoadMeter


@dataclass(frozen=True)
class Job:
    key: str
    """Unique name; also the results' key and (slugged) the folder of its runs."""
    run: Callable[[Path, int], dict]
    """(folder for this run's files, round index from 0) -> the run's result."""
    describe: Callable[[dict], str] = lambda result: ""
    """One line of progress about a finished run."""


@dataclass(frozen=True)
class Limits:
    budget_s: float
    """Seconds the rounds may take; a round that would end past it is not started."""
    min_rounds: int = BENCH_MIN_ROUNDS
    """Rounds before the verdict may stop the measurement."""
    fixed_rounds: Optional[int] = None
    """Exactly this many rounds, whatever the verdict and the budget (--rounds)."""
    max_rounds: int = BENCH_MAX_ROUNDS
    """Rounds run at most, those left out included (with --rounds: twice as many as asked)."""
    max_other_cores: float = BENCH_MAX_OTHER_CORES
    """A round during which other processes used more cores than this (on average over one
    of its jobs) is left out and run again."""


@dataclass
class Rounds:
    """What the rounds gave: every kept round's result per job key, why measuring stopped,
    and the rounds left out because the machine was busy with other processes."""
    results: dict
    stop_reason: str
    left_out: list
    """[{"round": attempt number from 1, "job": key, "other_cores": cores}, ...]"""
    stopped_by: Optional[int] = None
    """The signal (Ctrl-C, SIGTERM, SIGHUP) that ended the measuring early, if one did."""

    @property
    def kept(self) -> int:
        return len(next(iter(self.results.values()), []))


def keep_going(done: int, decided: bool, elapsed_s: float, last_round_s: float, limits: Limits,
               attempts: Optional[int] = None) -> tuple[bool, str]:
    """(whether to run another round, why measuring stops when it does). `done`: rounds
    kept; `attempts`: rounds run, those left out included. Two rounds at least, whatever the
    budget (an interval needs two) — but rounds left out do not get past the budget."""
    attempts = done if attempts is None else attempts
    if limits.fixed_rounds is not None:
        if done >= limits.fixed_rounds:
            return False, "as many as asked (--rounds)"
        if attempts >= 2 * limits.fixed_rounds:
            return False, "twice as many as asked (--rounds) were run, the others left out"
        return True, ""
    if attempts >= limits.max_rounds:
        return False, "the most rounds a bench runs"
    if done < 2 and attempts == done:
        return True, ""  # two rounds at least, whatever the budget, unless others' load spoils them
    if decided and done >= limits.min_rounds:
        return False, "the verdict was decided"
    if elapsed_s + last_round_s > limits.budget_s:
        return False, f"another round would end past the {limits.budget_s:g} s budget (--budget)"
    return True, ""


def slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _disturbance(others: dict[str, Optional[float]], limit: float) -> Optional[tuple[str, float]]:
    """(the job, the cores other processes used during it) when over `limit`, else None."""
    known = [(key, cores) for key, cores in others.items() if cores is not None]
    if not known:
        return None
    key, cores = max(known, key=lambda kc: kc[1])
    return (key, cores) if cores > limit else None


def run_rounds(jobs: list[Job], out: Path, limits: Limits, decided_after: Callable[[dict[str, list[dict]]], bool],
               say: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
               meter: Callable[[], LoadMeter] = LoadMeter) -> Rounds:
    """Runs rounds of `jobs` until `keep_going` says stop."""
    results: dict[str, list[dict]] = {job.key: [] for job in jobs}
    left_out: list[dict] = []
    try:
        return _rounds(jobs, out, limits, decided_after, say, clock, meter, results, left_out)
    except (KeyboardInterrupt, Stopped) as exc:
        # The rounds complete so far stand; the one under way is dropped (its finished runs
        # stay in their folders).
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        return Rounds(results, f"stopped by {signal_name(signum)}", left_out, stopped_by=signum)


def _rounds(jobs, out, limits, decided_after, say, clock, meter, results, left_out) -> Rounds:
    started = clock()
    done = attempts = 0
    last_round_s = 0.0
    while True:
        go_on, reason = keep_going(done, done > 0 and decided_after(results), clock() - started, last_round_s, limits,
                                   attempts)
        if not go_on:
            return Rounds(results, reason, left_out)
        round_start = clock()
        order = jobs if attempts % 2 == 0 else jobs[::-1]
        this_round, others = {}, {}
        for job in order:
            load = meter()
            result = job.run(out / "runs" / f"{slug(job.key)}-{attempts + 1}", done)
            others[job.key] = load.other_cores()
            this_round[job.key] = result
            line = job.describe(result)
            if line:
                busy = f" (other processes: {others[job.key]:.2f} cores)" if others[job.key] is not None else ""
                say(f"  round {attempts + 1}: {job.key}: {line}{busy}")
        attempts += 1
        last_round_s = clock() - round_start
        disturbed = _disturbance(others, limits.max_other_cores)
        if disturbed is not None:
            left_out.append({"round": attempts, "job": disturbed[0], "other_cores": disturbed[1]})
            say(f"  round {attempts} left out: other processes kept {disturbed[1]:.2f} cores busy while "
                f"{disturbed[0]} was measured (more than {limits.max_other_cores:g}, --max-other-load)")
            continue
        for key, result in this_round.items():
            results[key].append(result)
        done += 1
        elapsed = clock() - started
        if done == 1 and limits.fixed_rounds is None and elapsed + last_round_s > limits.budget_s:
            say(f"  note: round 1 took {last_round_s:.0f} s, so a second ends past the {limits.budget_s:g} s budget "
                "(--budget); it runs anyway: an interval needs two rounds (--rounds 1 measures one)")
