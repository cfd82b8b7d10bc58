"""How long a run took from the user's command to its first training step.

Measured from when the command's process started (not from when our Python code began to
run), so interpreter start-up, imports, spawning ranks and joining the process group all
count, as the user experiences them. A rank started by a launcher (torchrun, spawn, mpirun,
srun) counts from when its launcher process started.
"""

from __future__ import annotations

import os
import time

from .environment import DistEnv


def process_age(pid: int) -> float | None:
    """Seconds since process `pid` started, from /proc (Linux); None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22 of stat(5): start time, clock ticks after boot
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def command_age(env: DistEnv) -> float | None:
    """Seconds since the user's command started: the launcher (our parent) when one
    started this process, else this process."""
    return process_age(os.getppid() if env.launched else os.getpid())
