"""No rank outlives its launcher: a rank whose launcher is gone stops as if it got SIGTERM.

A launcher killed outright (SIGKILL, the out-of-memory killer, a crash) cannot stop its
ranks, and a rank left running writes into an output folder whose lock died with the
launcher, so a new run could be let in beside it. So every rank watches, from a thread of
the rank runner, every half second:

- its parent process (spawn's launcher, torchrun's agent, mpirun's daemon, slurmstepd): a
  rank whose parent is gone has been handed to another process (its parent pid changed);
- the `scaletrain` command that launched the job, when it runs on this host (named by
  LAUNCHER_VAR, which the command gives the processes it starts): under torchrun and
  mpirun it is the rank's grandparent, and it may die while the agent lives on.

Then the rank says so in one line and sends itself SIGTERM, which ends it the way the
launcher would have (or runs the program's own SIGTERM handler); one that is still there
STOP_AFTER_S later leaves with status 143. Pids are compared with their start times, so a
pid reused by another process is not taken for the launcher.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Optional

#: "PID START_TIME HOST" of the `scaletrain` command that launched the job.
LAUNCHER_VAR = "SCALETRAIN_LAUNCHER_PROCESS"
POLL_S = 0.5
STOP_AFTER_S = 10.0


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


class ParentWatch:
    def __init__(self, rank: int, environ=os.environ):
        self.rank = rank
        self.parent = os.getppid()
        self.parent_started = start_time(self.parent)
        self.launcher = _launcher_here(environ.get(LAUNCHER_VAR))
        self._stop = threading.Event()

    def start(self) -> "ParentWatch":
        if sys.platform.startswith("linux"):
            threading.Thread(target=self._run, name="scaletrain-parent-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def gone(self) -> Optional[str]:
        """What is gone (the parent, the launching command), or None."""
        if os.getppid() != self.parent or start_time(self.parent) != self.parent_started:
            return f"its parent process (pid {self.parent})"
        if self.launcher is not None and start_time(self.launcher[0]) != self.launcher[1]:
            return f"the scaletrain command that launched it (pid {self.launcher[0]})"
        return None

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            what = self.gone()
            if what is None:
                continue
            try:
                print(f"scaletrain: rank {self.rank}: {what} is gone; stopping this rank", file=sys.stderr,
                      flush=True)
            except (OSError, ValueError):  # the terminal or pipe went with the launcher
                pass
            os.kill(os.getpid(), signal.SIGTERM)
            if not self._stop.wait(STOP_AFTER_S):  # the program's own SIGTERM handler did not end it
                os._exit(128 + signal.SIGTERM)
            return
