"""Runs a plan: starts this node's command (or the spawn children), waits, stops whatever is
left, and reports the first failure first. The plan itself is never changed here."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..defaults import STOP_GRACE_S
from .failures import read_records, report
from .plan import ERROR_DIR_VAR, Command, Plan



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


def _kill_all(processes: set[tuple[int, str]]) -> None:
    """SIGKILL those still alive; the start time guards against a reused pid."""
    for pid, started in processes:
        if _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


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


def run_command(command: Command, error_dir: str) -> int:
    """Runs one command in its own process group, forwarding Ctrl-C/SIGTERM to all of it."""
    env = {**os.environ, **command.env, ERROR_DIR_VAR: error_dir}
    try:
        proc = subprocess.Popen(list(command.argv), env=env, start_new_session=True)
    except FileNotFoundError:
        print(f"scaletrain: error: {command.argv[0]} was not found; install it or choose another --launcher",
              file=sys.stderr)
        return 2

    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    below: set[tuple[int, str]] = set()
    try:
        while True:
            try:
                code = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                below.update(descendants(proc.pid))  # remembered: orphans lose their parent link
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        below.update(descendants(proc.pid))
        stop_group(proc.pid)  # ranks or daemons that outlived the launcher go too
        _kill_all(below)
    return 128 - code if code < 0 else code


def execute(plan: Plan) -> int:
    """Runs the plan's commands for this node; returns the job's exit status."""
    error_dir = tempfile.mkdtemp(prefix="scaletrain-errors-")
    try:
        if plan.in_process:
            from .spawn import run_in_children

            code = run_in_children(plan, error_dir)
        else:
            code = 0
            for command in plan.commands:
                if command.runs_here:
                    code = run_command(command, error_dir)
                    if code:
                        break
        records = read_records(error_dir)
        if code or records:
            report(records, code or 1)
        return code or (1 if records else 0)
    finally:
        shutil.rmtree(error_dir, ignore_errors=True)
