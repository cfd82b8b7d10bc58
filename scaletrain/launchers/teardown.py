"""A rank that has destroyed its process group ends, even if torch's teardown deadlocks.

The deadlock (torch 2.13, Gloo; see docs/launching.md): the last reference to the process
group goes (often with DDP's reducer, when the model is freed after
`destroy_process_group()`), and its destructor joins Gloo's worker thread while holding the
GIL; that thread is still releasing a finished collective's tensors, which needs the GIL.
Both wait forever; the main thread never runs Python again.

The cause is removed here: when the program destroys a process group, the guard keeps a
reference to the groups it destroys first, so no group's destructor (and its join) ever runs while the
program runs; the rank runner ends the process with `_exit` once the program returns, which
runs no destructor at all. A group destroyed this way keeps its idle threads and sockets
until the process ends.

Should the deadlock still happen some other way, nothing written in Python can act then:
every Python thread needs the GIL. So the guard is also
a POSIX timer whose expiry runs `_exit` in a C thread of glibc's (SIGEV_THREAD), armed when
the program destroys its process group and pushed back every second by a Python thread.
While the program runs Python (even a long post-training step: the interpreter hands the
GIL over every few milliseconds), the timer never fires. Only a main thread that keeps the
GIL for TEARDOWN_GRACE_S without a break after its process group is gone, which is the
deadlock, lets it fire: the rank then ends with status 0 (its distributed work was done),
leaving a mark that makes the launcher say so.

Linux with glibc only (the timer is created through ctypes); elsewhere nothing is armed.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from typing import Callable, Optional

from ..foundation.defaults import TEARDOWN_GRACE_S

_CLOCK_MONOTONIC = 1
_SIGEV_THREAD = 2


class _SigEvent(ctypes.Structure):
    """struct sigevent (64 bytes on 64-bit Linux), for SIGEV_THREAD."""

    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("function", ctypes.c_void_p), ("attributes", ctypes.c_void_p),
                ("_pad", ctypes.c_byte * (64 - 32))]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("interval", _TimeSpec), ("value", _TimeSpec)]


class ExitTimer:
    """`_exit(status)` after `seconds`, from a C thread; `push()` starts the count again."""

    def __init__(self, seconds: float, status: int = 0):
        self.seconds = seconds
        self._libc = ctypes.CDLL(None, use_errno=True)
        event = _SigEvent(value=status, notify=_SIGEV_THREAD,
                          function=ctypes.cast(self._libc._exit, ctypes.c_void_p).value)
        self._timer = ctypes.c_void_p()
        if self._libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(self._timer)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create failed")

    def push(self) -> None:
        whole = int(self.seconds)
        spec = _ITimerSpec(value=_TimeSpec(whole, int((self.seconds - whole) * 1e9)))
        self._libc.timer_settime(self._timer, 0, ctypes.byref(spec), None)


def _groups_destroyed(group=None, *_args, **_kwargs) -> list:
    """The groups a `destroy_process_group(group)` call destroys: that subgroup, or every
    group torch.distributed knows of (the default one and its subgroups)."""
    try:
        c10d = sys.modules["torch.distributed.distributed_c10d"]
        if group is not None and group is not c10d.GroupMember.WORLD:
            return [group]
        return list(c10d._world.pg_map)
    except (KeyError, AttributeError):  # another torch: keep nothing, the timer still bounds it
        return []


class TeardownGuard:
    """Wraps `torch.distributed.destroy_process_group` once the program has imported it
    (watching sys.modules: the rank runner imports no torch itself); after the first call
    returns, the exit timer is armed and kept pushed back."""

    def __init__(self, on_armed: Callable[[], None], grace: float = TEARDOWN_GRACE_S):
        self.on_armed, self.grace = on_armed, grace
        self._timer: Optional[ExitTimer] = None
        self._stop = threading.Event()
        self._kept: list = []

    def start(self) -> "TeardownGuard":
        if sys.platform.startswith("linux"):
            threading.Thread(target=self._watch, name="scaletrain-teardown", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):  # until the program imports torch.distributed
            dist = sys.modules.get("torch.distributed")
            if dist is not None and hasattr(dist, "destroy_process_group"):
                dist.destroy_process_group = self._wrap(dist.destroy_process_group)
                return

    def _wrap(self, destroy):
        def destroy_process_group(*args, **kwargs):
            self._kept.extend(_groups_destroyed(*args, **kwargs))  # their destructors never run (module docstring)
            result = destroy(*args, **kwargs)
            if self._timer is None and not self._stop.is_set():
                self._arm()
            return result

        destroy_process_group.__wrapped__ = destroy
        destroy_process_group.__doc__ = destroy.__doc__
        return destroy_process_group

    def _arm(self) -> None:
        try:
            self._timer = ExitTimer(self.grace)
        except (OSError, AttributeError):  # no POSIX timers here: leave the teardown as it is
            return
        self._timer.push()
        self.on_armed()
        try:
            threading.Thread(target=self._keep_pushing, name="scaletrain-teardown-timer", daemon=True).start()
        except RuntimeError:  # no memory left for a thread's stack: the one push above still bounds the exit
            pass

    def _keep_pushing(self) -> None:
        while True:
            self._timer.push()  # runs only while this thread gets the GIL
            time.sleep(1.0)
