"""A measuring job (a plan's probe, a bench configuration, a collective's timing) that failed:
one line for the command that started it, never a traceback of scaletrain's own.

The job's ranks say what went wrong themselves, above (a rank that ran out of memory says so
in one line; mpirun names a host it could not reach). Where that was already the one line a
scaletrain rank gives (exit status 2), the command adds nothing; otherwise it says which job
failed and what to look at.
"""

from __future__ import annotations

from typing import Optional

from ..foundation.errors import UsageError

#: A job's exit status when one of its ranks said its one-line error itself.
SAID_BY_THE_JOB = 2


class MeasurementFailed(UsageError):
    """What a measuring command stops with when one of its jobs failed (exit status 2)."""

    def __init__(self, message: str, said: bool = False):
        super().__init__(message)
        self.said = said
        """True when the job's own line (above) is the whole story: nothing more is printed."""


def measurement_failed(what: str, code: int, hosts=None) -> MeasurementFailed:
    """The error for job `what` (e.g. "the plan's probe job (2 processes × 1 thread)") that
    ended with `code`; `hosts`: the machines it spanned (measure.jobs.Hosts), if any."""
    if code == SAID_BY_THE_JOB:
        return MeasurementFailed(f"{what} stopped on the error above", said=True)
    where: Optional[str] = None
    if hosts is not None:
        where = (f"check that every host of {hosts.flag} ({hosts.names}) answers ssh without a password and has "
                 "scaletrain installed, or measure on this machine alone (leave out --hosts)")
    return MeasurementFailed(f"{what} failed (exit status {code}); its own error is printed above"
                             + (f"; {where}" if where else ""))


def out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text.lower())
