"""How much of the machine other processes used while a job was being measured.

On a shared machine a measurement can be spoilt by a job that is not ours: on 2 CPU cores a
third runnable process slows a process with two threads (whose every parallel operation
waits for its slower thread) far more than two processes with one thread each, so one busy
moment can turn "two processes are slower" into a 2× speedup. The meter compares the CPU time
the whole machine spent (from /proc/stat: everything but idle and I/O wait, including time
stolen by the hypervisor) with the CPU time of this process and of the children it waited
for (the job's ranks): what is left was used by other processes. Where /proc/stat does not
exist the meter reports nothing.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Optional

_PROC_STAT = "/proc/stat"


def _busy_ticks(fields: list[str]) -> int:
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    ticks = [int(v) for v in fields[1:9]]
    return sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)


def _machine_busy_seconds() -> Optional[float]:
    """Busy CPU seconds of the cores this process may run on: all of them (the machine's
    line) unless its affinity is narrower — a process pinned to some cores (a host of the
    namespace test bed, a job given a cpuset) is disturbed only by what runs on those."""
    try:
        with open(_PROC_STAT) as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except OSError:
        return None
    if not lines or lines[0][0] != "cpu":
        return None
    mine = {f"cpu{c}" for c in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else set()
    per_core = [fields for fields in lines[1:] if fields[0] in mine]
    if not per_core or len(per_core) == len(lines) - 1:
        per_core = lines[:1]
    return sum(_busy_ticks(fields) for fields in per_core) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    """CPU seconds of this process and of every child it has waited for."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class LoadMeter:
    """Started when made; `other_cores()` is the average number of cores that processes other
    than this one and its waited-for children kept busy since then."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._start = clock()
        self._busy = _machine_busy_seconds()
        self._own = _own_seconds()

    def seconds(self) -> Optional[tuple[float, float, float]]:
        """(CPU seconds the whole machine spent, CPU seconds of this process and its waited-for
        children, wall seconds), all since the start; None where /proc/stat cannot be read."""
        busy = _machine_busy_seconds()
        if busy is None or self._busy is None:
            return None
        return busy - self._busy, _own_seconds() - self._own, self._clock() - self._start

    def other_cores(self) -> Optional[float]:
        measured = self.seconds()
        if measured is None or measured[2] <= 0:
            return None
        machine, own, wall = measured
        return max(0.0, (machine - own) / wall)
