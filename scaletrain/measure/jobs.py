"""Running `scaletrain <argv>` as a job of N processes on this machine: how bench, plan and
comm start the jobs they measure. The one place that knows which launcher does it."""

from __future__ import annotations


def run_job(argv: list[str], nproc: int) -> int:
    """Runs `scaletrain <argv>` as `nproc` local ranks (spawn launcher); returns the job's
    exit status. A failing rank's traceback goes to stderr. A job stopped by Ctrl-C,
    SIGTERM or SIGHUP raises Stopped, for the command to say what it had measured by then."""
    from ..launchers.facade import spawn
    from ..launchers.interrupts import STOP_STATUSES, Stopped

    code = spawn(argv, nproc, announce=False)
    if code in STOP_STATUSES:
        raise Stopped(code - 128)
    return code
