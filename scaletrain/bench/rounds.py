"""Rounds of measurement until the answer is clear or the time budget is spent.

A round runs every job once (each configuration, and the plan's measurements when there are
predictions), in alternating order — forwards in odd rounds, backwards in even ones — so that
a slow drift of the machine's load hits every job alike. After each round the caller says
whether the verdict is decided; rounds go on while it is not and the next round still fits
in the budget (judged by the last round's duration).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..defaults import BENCH_MAX_ROUNDS, BENCH_MIN_ROUNDS


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


def keep_going(done: int, decided: bool, elapsed_s: float, last_round_s: float, limits: Limits) -> tuple[bool, str]:
    """(whether to run another round, why measuring stops when it does). Two rounds at
    least, whatever the budget: an interval needs two."""
    if limits.fixed_rounds is not None:
        return done < limits.fixed_rounds, "as many as asked (--rounds)"
    if done < 2:
        return True, ""
    if decided and done >= limits.min_rounds:
        return False, "the verdict was decided"
    if done >= limits.max_rounds:
        return False, "the most rounds a bench runs"
    if elapsed_s + last_round_s > limits.budget_s:
        return False, f"another round would end past the {limits.budget_s:g} s budget (--budget)"
    return True, ""


def slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def run_rounds(jobs: list[Job], out: Path, limits: Limits, decided_after: Callable[[dict[str, list[dict]]], bool],
               say: Callable[[str], None], clock: Callable[[], float] = time.monotonic
               ) -> tuple[dict[str, list[dict]], str]:
    """Runs rounds of `jobs`; returns every run's result per job key, and why it stopped."""
    results: dict[str, list[dict]] = {job.key: [] for job in jobs}
    started = clock()
    done, last_round_s = 0, 0.0
    while True:
        go_on, reason = keep_going(done, done > 0 and decided_after(results), clock() - started, last_round_s, limits)
        if not go_on:
            return results, reason
        round_start = clock()
        order = jobs if done % 2 == 0 else jobs[::-1]
        for job in order:
            result = job.run(out / "runs" / f"{slug(job.key)}-{done + 1}", done)
            results[job.key].append(result)
            line = job.describe(result)
            if line:
                say(f"  round {done + 1}: {job.key}: {line}")
        done += 1
        last_round_s = clock() - round_start
