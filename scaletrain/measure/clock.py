"""Timestamps for the parts of a step, without adding a host synchronisation per step.

On the CPU a timestamp is `time.perf_counter()`: the work is done when the call returns.
On CUDA the work is only queued when the call returns, so a host clock would measure how
fast Python enqueues kernels; instead each mark records a CUDA event on the stream, and the
events are read once, after the last step (one synchronisation for the whole measurement).
"""

from __future__ import annotations

import statistics
import time
from typing import Sequence

import torch


class Clock:
    """Records named marks per step; `intervals(a, b)` gives seconds from mark a to mark b."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.steps: list[dict[str, object]] = []

    def start_step(self, kind: str) -> dict:
        marks: dict[str, object] = {"_kind": kind}
        self.steps.append(marks)
        self.mark("start")
        return marks

    def mark(self, name: str) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.steps[-1][name] = event
        else:
            self.steps[-1][name] = time.perf_counter()

    def _seconds(self, a, b) -> float:
        if self.cuda:
            return a.elapsed_time(b) / 1000.0  # milliseconds between the two events
        return b - a

    def intervals(self, first: str, last: str, kind: str | None = None, skip: int = 0) -> list[float]:
        """Seconds between two marks for every recorded step of `kind` (all kinds: None),
        leaving out the first `skip` steps of that kind (warm-up)."""
        if self.cuda:
            torch.cuda.synchronize()  # the one synchronisation: after the measured steps
        chosen = [m for m in self.steps if kind is None or m["_kind"] == kind][skip:]
        return [self._seconds(m[first], m[last]) for m in chosen if first in m and last in m]

    def step_walls(self, kind: str, skip: int = 0) -> list[float]:
        """Seconds from each step's start to the next step's start (the whole step, loop
        overhead included), for steps of `kind` that another step follows."""
        if self.cuda:
            torch.cuda.synchronize()
        walls = []
        seen = 0
        for this, following in zip(self.steps, self.steps[1:]):
            if this["_kind"] != kind:
                continue
            seen += 1
            if seen > skip:
                walls.append(self._seconds(this["start"], following["start"]))
        return walls


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
