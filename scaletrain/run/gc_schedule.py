"""Python's garbage collector on a schedule (`gc_every=N`, default 50): after setup, what
exists is frozen (`gc.freeze`: never scanned again), automatic collection is off, and a
collection runs every N training steps; closing the run puts the collector back as it was.

A training step makes many short-lived Python objects (autograd's, the optimizer's); left to
itself the collector runs when their count crosses its threshold, which is at some step
rather than another, and then walks every object the process holds — the model's modules,
the data, the libraries: a step of hundreds of milliseconds among ones of tens on a GPU.
Tensors are freed by reference counting, not by the collector, so memory is not held longer
(cycles wait for the next scheduled collection). torchtitan does the same (every 50 steps).
"""

from __future__ import annotations

import gc


class GcSchedule:
    def __init__(self, every: int):
        self.every = every
        self.active = False
        self._was_enabled = True

    def start(self) -> None:
        """After a model's setup: collect once, freeze what exists, and stop automatic collection."""
        if not self.every:
            return
        if not self.active:
            self._was_enabled, self.active = gc.isenabled(), True
            gc.disable()
        gc.collect()
        gc.freeze()

    def step(self, steps_taken: int) -> None:
        if self.active and steps_taken % self.every == 0:
            gc.collect()  # only what was made since the freeze: milliseconds

    def stop(self) -> None:
        if self.active:
            self.active = False
            gc.unfreeze()
            if self._was_enabled:
                gc.enable()
