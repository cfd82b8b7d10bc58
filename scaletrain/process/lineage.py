"""Who launched this process, and whether it is still there: its parent process (spawn's
launcher, torchrun's agent, mpirun's daemon, slurmstepd) and the `scaletrain` command that
launched the job (named by LAUNCHER_VAR, which the command gives the processes it starts).

Pure reads of /proc, no threads: the rank runner's watch (launchers/parent_watch.py) and the
hang watchdog (fault/watchdog.py), which must not talk to a rendezvous store that went with
the launcher, both ask it. Pids are compared with their start times, so a pid reused by
another process is not taken for the launcher.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional

#: "PID START_TIME HOST" of the `scaletrain` command that launched the job.
LAUNCHER_VAR = "SCALETRAIN_LAUNCHER_PROCESS"


def start_time(pid: int) -> Optional[str]:
    """The process's start time (clock ticks after boot), or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def this_process() -> str:
    """LAUNCHER_VAR's value naming this process."""
    return f"{os.getpid()} {start_time(os.getpid())} {socket.gethostname()}"


def _launcher_here(value: Optional[str]) -> Optional[tuple[int, str]]:
    """(pid, start time) of the launching command when it runs on this host."""
    try:
        pid, started, host = (value or "").split()
    except ValueError:
        return None
    return (int(pid), started) if host == socket.gethostname() and pid.isdigit() else None


class Lineage:
    """This process's parent and launching command as they were when it was made."""

    def __init__(self, environ=os.environ):
        self.parent = os.getppid()
        self.parent_started = start_time(self.parent)
        self.launcher = _launcher_here(environ.get(LAUNCHER_VAR))

    def gone(self) -> Optional[str]:
        """What is gone (the parent, the launching command), or None."""
        if os.getppid() != self.parent or start_time(self.parent) != self.parent_started:
            return f"its parent process (pid {self.parent})"
        if self.launcher is not None and start_time(self.launcher[0]) != self.launcher[1]:
            return f"the scaletrain command that launched it (pid {self.launcher[0]})"
        return None
