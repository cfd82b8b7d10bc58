"""Ctrl-C and SIGTERM while a job runs, the same under every launcher: the signal is
remembered, passed on to the ranks by whoever runs them, the launcher waits (bounded) for
them to end, and the job's exit status is 128 + the signal (130, 143) whatever the ranks
or the launcher program answered, so that no restart loop retries what the user stopped.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable, Optional

HANDLED = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupts:
    """A context manager: while inside it, SIGINT and SIGTERM call `on_signal` callbacks
    (to stop the ranks) instead of raising KeyboardInterrupt or killing this process."""

    def __init__(self) -> None:
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
            print(f"scaletrain: {signal_name(signum)} received: stopping the job's processes", file=sys.stderr,
                  flush=True)
        for callback in self._callbacks:
            callback(signum if first else signal.SIGKILL)  # a second Ctrl-C: no more waiting

    def status(self, code: int) -> int:
        """The job's exit status: 128 + the signal once one was received."""
        return 128 + self.signum if self.signum is not None else code

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            self._previous = {s: signal.signal(s, self._handle) for s in HANDLED}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
