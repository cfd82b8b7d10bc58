"""Restarting a failed group of processes: around any "start the job and wait" function.

    status = run_with_restarts(lambda attempt: spawn(argv_for(attempt), nproc), max_restarts=2)

`execute(attempt)` starts the whole group (attempt 0, 1, ...) and returns its exit status
once every process has ended: it must stop the survivors when one dies, and should use a
new rendezvous port each time (a port of the dead group may still be in TIME_WAIT). The
loop does not care how the processes start, so the same loop serves spawn, mpirun or any
other launcher that can execute a plan.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

from .interrupts import STOP_STATUSES

#: Statuses that a restart cannot cure: a usage error (2) fails the same way again, and an
#: interrupt (130), termination (143) or hang-up (129) is the user asking to stop.
NOT_RESTARTABLE = frozenset({0, 2, *STOP_STATUSES})


def run_with_restarts(execute: Callable[[int], int], max_restarts: int,
                      describe_resume: Optional[Callable[[], str]] = None) -> int:
    attempt = 0
    while True:
        status = execute(attempt)
        if status in NOT_RESTARTABLE or attempt >= max_restarts:
            if status not in NOT_RESTARTABLE and max_restarts:
                print(f"scaletrain: giving up: the group failed {attempt + 1} time(s) (--max-restarts {max_restarts})",
                      file=sys.stderr, flush=True)
            return status
        attempt += 1
        where = describe_resume() if describe_resume else "from the start"
        print(f"scaletrain: the group failed (exit status {status}); restart {attempt} of {max_restarts}, "
              f"resuming {where}", file=sys.stderr, flush=True)
