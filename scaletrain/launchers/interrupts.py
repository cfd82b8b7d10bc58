"""Ctrl-C, SIGTERM and SIGHUP (a closed terminal, a dropped ssh session) while a job runs,
the same under every launcher: the signal is remembered, passed on to the ranks by whoever
runs them, the launcher waits (bounded) for them to end, and the job's exit status is 128 +
the signal (130, 143, 129) whatever the ranks or the launcher program answered, so that no
restart loop retries what the user stopped. SIGHUP is treated like SIGTERM; a SIGHUP that
is ignored (`nohup`) stays ignored.

Outside a job (a command checking its flags, bench between two jobs) `stop_signals()`
turns SIGTERM and SIGHUP into a `Stopped` exception, as Python turns SIGINT into
KeyboardInterrupt, so that the command ends with one line and the same statuses.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Callable, Optional

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Exit statuses of a job or command stopped by one of those signals (128 + the signal).
STOP_STATUSES = frozenset(128 + s for s in HANDLED)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()  # only the main thread may set handlers


def _handled_here() -> list[int]:
    """The signals to catch: all of HANDLED, except a SIGHUP that `nohup` told us to ignore."""
    return [s for s in HANDLED if not (s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN)]


class Stopped(BaseException):
    """The command was stopped by a signal (SIGINT, SIGTERM, SIGHUP); `status` is 128 + it.
    `said`: the line saying so was printed already (by the launcher that stopped a job)."""

    def __init__(self, signum: int, said: bool = False):
        super().__init__(f"stopped by {signal_name(signum)}")
        self.signum, self.said = signum, said

    @property
    def status(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stop_signals():
    """SIGTERM and SIGHUP raise Stopped in the main thread while inside (see the module
    docstring); SIGINT keeps raising KeyboardInterrupt."""
    if not _main_thread():
        yield
        return

    def raise_stopped(signum: int, _frame) -> None:
        raise Stopped(signum)

    previous = {s: signal.signal(s, raise_stopped) for s in _handled_here() if s != signal.SIGINT}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def sigint_as_python() -> None:
    """Ctrl-C raises KeyboardInterrupt again (Python's own handler), unless it is ignored. For
    scaletrain's ranks once their imports are done: until then the rank runner ends them on
    Ctrl-C at once, since an exception raised inside torch's import can break it."""
    if _main_thread() and signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.default_int_handler):
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Deferred:
    """A context manager: while inside it, SIGINT, SIGTERM and SIGHUP are only noted, and the
    first one noted raises Stopped on leaving. For imports of torch and NumPy: an exception
    raised in the middle of one leaves a module half-initialised, after which the program
    may go on as if nothing had happened, or fail with an ImportError of its own."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._previous: dict = {}

    def _note(self, signum: int, _frame) -> None:
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> "Deferred":
        if _main_thread():
            self._previous = {s: signal.signal(s, self._note) for s in _handled_here()}
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        if self.signum is not None and exc_type is None:
            raise Stopped(self.signum)


class Interrupts:
    """A context manager: while inside it, SIGINT, SIGTERM and SIGHUP call `on_signal`
    callbacks (to stop the ranks) instead of raising or killing this process. `announce`:
    say so at once (False: the caller says it when the job has ended)."""

    def __init__(self, announce: bool = True) -> None:
        self.announce = announce
        self.signum: Optional[int] = None
        self._callbacks: list[Callable[[int], None]] = []
        self._previous: dict = {}

    def on_signal(self, callback: Callable[[int], None]) -> None:
        self._callbacks.append(callback)
        if self.signum is not None:  # a signal came before this callback was registered
            callback(self.signum)

    def _handle(self, signum: int, _frame) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if first and self.announce:
            print(f"scaletrain: {signal_name(signum)} received: stopping the job's processes", file=sys.stderr,
                  flush=True)
        for callback in self._callbacks:
            callback(signum if first else signal.SIGKILL)  # a second Ctrl-C: no more waiting

    def status(self, code: int) -> int:
        """The job's exit status: 128 + the signal once one was received."""
        return 128 + self.signum if self.signum is not None else code

    def __enter__(self) -> "Interrupts":
        if _main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in _handled_here()}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
