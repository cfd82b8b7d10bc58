"""No rank outlives its launcher: a rank whose launcher is gone stops as if it got SIGTERM.

A launcher killed outright (SIGKILL, the out-of-memory killer, a crash) cannot stop its
ranks, and a rank left running writes into an output folder whose lock died with the
launcher, so a new run could be let in beside it. So every rank watches, from a thread of
the rank runner, every half second (scaletrain/process/lineage.py):

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
import sys
import threading

from ..process.lineage import LAUNCHER_VAR, Lineage, start_time, this_process  # noqa: F401 - names launchers use

POLL_S = 0.5
STOP_AFTER_S = 10.0


class ParentWatch:
    def __init__(self, rank: int, environ=os.environ):
        self.rank = rank
        self.lineage = Lineage(environ)
        self._stop = threading.Event()

    def start(self) -> "ParentWatch":
        if sys.platform.startswith("linux"):
            threading.Thread(target=self._run, name="scaletrain-parent-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def gone(self):
        """What is gone (the parent, the launching command), or None."""
        return self.lineage.gone()

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
