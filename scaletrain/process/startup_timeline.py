"""Where start-up time goes: a timeline of the command and its ranks, on demand.

With `SCALETRAIN_TIMELINE=FILE` in the environment, every process of a run (the command and
each rank, which inherit the variable) appends one JSON line per milestone to FILE: which
process, which milestone, and the wall-clock time. `benchmarks/startup_timeline.py` runs a
command and hand-written DDP under torchrun side by side this way and prints where each
spends its time to the first training step. Without the variable, `mark` does nothing but
look it up. No torch here: the first milestones come before it is imported.
"""

from __future__ import annotations

import json
import os
import time

TIMELINE_VAR = "SCALETRAIN_TIMELINE"


def process_started(pid: int | str = "self") -> float:
    """The wall-clock time process `pid` (this one) started (from /proc: the kernel's own record)."""
    from .startup_time import process_age

    return time.time() - (process_age(os.getpid() if pid == "self" else int(pid)) or 0.0)


def mark(event: str, at: float | None = None) -> None:
    """Notes that this process reached `event` now (or at `at`), where a timeline is asked for."""
    path = os.environ.get(TIMELINE_VAR)
    if not path:
        return
    record = {"pid": os.getpid(), "rank": os.environ.get("RANK"), "event": event, "t": time.time() if at is None else at}
    with open(path, "a") as fh:  # one short write: lines of several processes do not interleave
        fh.write(json.dumps(record) + "\n")
