"""Running one launcher program (torchrun, mpirun, srun) in its own process group, and
making sure that nothing it started outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from ..foundation.defaults import STOP_GRACE_S
from .failures import any_started, note_vanished, write_record
from .interrupts import Interrupts
from .launch_plan import Command, execution_env


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> set[tuple[int, str]]:
    """Every live process below `pid` as (pid, start time), whatever its session: torchrun
    starts each worker in a session of its own, so killing our process group misses them."""
    children: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append((int(stat.parent.name), fields[19]))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child[0])
    return found


def _alive(processes: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """Those still running (the start time guards against a reused pid)."""
    return {(pid, started) for pid, started in processes if _start_time(pid) == started}


def _signal_all(processes: set[tuple[int, str]], sig: int) -> None:
    for pid, _started in _alive(processes):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_all(processes: set[tuple[int, str]], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM those still alive, wait up to `grace` seconds, then SIGKILL what is left."""
    _signal_all(processes, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_all(processes, signal.SIGKILL)


#: Seconds the processes a finished rank started get to end after SIGTERM, before SIGKILL.
CHILDREN_GRACE_S = 2.0


def end_descendants(pid: int, grace: float = CHILDREN_GRACE_S) -> int:
    """Stops every process below `pid` (a rank's own children: a `subprocess.Popen` it never
    waited for, DataLoader workers): they end with the rank, under every launcher. Without
    this they outlive it (the spawn launcher's job ends with them re-parented to init) or
    keep its output open (mpirun waits for them). Returns how many were running."""
    below = descendants(pid)
    if below:
        stop_all(below, grace)
    return len(below)


def stop_group(pgid: int, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the whole process group (the launcher and every rank it started here), then
    SIGKILL whatever did not stop within `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.05)
        if not _group_alive(pgid):
            return


#: Exit status of a job whose ranks never started because the rendezvous of its nodes never
#: completed (the same as a rank's that gave up waiting for missing peers).
EXIT_NODES_MISSING = 3


def run_command(command: Command, error_dir: str, interrupts: Interrupts, stop_below: bool = False,
                join: Optional[tuple[float, Callable[[], str]]] = None) -> int:
    """Runs one command in its own process group; returns its exit status. A Ctrl-C, SIGTERM or
    SIGHUP of ours becomes a SIGTERM to all of it (a second one: SIGKILL). `stop_below`:
    instead, end the launcher program at once and SIGTERM the ranks below it (torchrun
    answers a signal with tracebacks of its own, though the user asked for the stop).
    `join`: (seconds, what to say): a launcher program that must first meet the other nodes
    (torchrun's rendezvous) and has started no rank of this host within that time is
    stopped, with one line (what to say), and the job ends with EXIT_NODES_MISSING."""
    env = {**os.environ, **command.env, **execution_env(error_dir)}
    try:
        proc = subprocess.Popen(list(command.argv), env=env, start_new_session=True)
    except FileNotFoundError:
        print(f"scaletrain: error: {command.argv[0]} was not found; install it or choose another --launcher",
              file=sys.stderr)
        return 2

    below: set[tuple[int, str]] = set()

    def forward(signum: int) -> None:
        try:
            if stop_below and signum != signal.SIGKILL:
                below.update(descendants(proc.pid))
                os.kill(proc.pid, signal.SIGKILL)
                _signal_all(below, signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGTERM if signum != signal.SIGKILL else signal.SIGKILL)
        except ProcessLookupError:
            pass

    interrupts.on_signal(forward)
    next_scan = 0.0
    join_by = time.monotonic() + join[0] if join else None
    try:
        while True:
            try:
                code = proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if join_by is not None and time.monotonic() > join_by and interrupts.signum is None:
                    if not any_started(error_dir):  # no rank to wait for: end the launcher program now
                        write_record(error_dir, -1, join[1](), "", status=EXIT_NODES_MISSING, explained=True,
                                     said=True)
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        return EXIT_NODES_MISSING
                    join_by = None
                if time.monotonic() > next_scan:
                    below.update(descendants(proc.pid))  # remembered: orphans lose their parent link
                    next_scan = time.monotonic() + 1.0
                if interrupts.signum is None:
                    note_vanished(error_dir)  # a rank killed from outside names no one itself
        if code and interrupts.signum is None:
            note_vanished(error_dir)
    finally:
        below.update(descendants(proc.pid))
        stop_group(proc.pid)  # ranks or daemons that outlived the launcher go too
        stop_all(below)
    return 128 - code if code < 0 else code
