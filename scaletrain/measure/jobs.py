"""Running `scaletrain <argv>` as a job of N processes on this machine: how bench, plan and
comm start the jobs they measure. The one place that knows which launcher does it."""

from __future__ import annotations


def run_job(argv: list[str], nproc: int) -> int:
    """Runs `scaletrain <argv>` as `nproc` local ranks (spawn launcher); returns the job's
    exit status. A failing rank's traceback goes to stderr."""
    from ..launchers.facade import spawn

    return spawn(argv, nproc)
