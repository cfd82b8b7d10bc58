"""When the training loop records a step, and what it records.

Rank 0 only, and without any communication: a record every N steps or every T seconds,
whichever comes first, and the ranks could not agree on when T seconds have passed without
talking every step. So the loss of a step record is rank 0's own average over the steps
since the previous record (the epoch record has the mean over all ranks), and samples/s is
rank 0's rate times the data-parallel size.
"""

from __future__ import annotations

import time
from typing import Callable, Optional


class StepRecorder:
    def __init__(self, every_steps: int, every_seconds: float, total_steps: int, first_step: int,
                 data_parallel_size: int, loss_is_local: bool, clock: Callable[[], float] = time.perf_counter):
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.total_steps, self.first_step = total_steps, first_step
        self.data_parallel_size = data_parallel_size
        self.loss_is_local = loss_is_local  # False where rank 0 computes no loss (a pipeline's first stage)
        self.clock = clock
        self.began = self.clock()
        self._mark = (0.0, 0, 0, self.began)  # epoch loss sum, epoch steps, epoch samples, time: at the last record

    def begin_epoch(self, loss_sum: float, steps: int, samples: int) -> None:
        """The epoch's running totals where it starts (not zero in a resumed epoch)."""
        self._mark = (loss_sum, steps, samples, self.clock())  # evaluation time is not training time

    def due(self, step: int) -> bool:
        return step % self.every_steps == 0 or self.clock() - self._mark[3] >= self.every_seconds

    def record(self, step: int, epoch: int, epochs: int, loss_sum, steps: int, samples: int,
               lr: Optional[float]) -> dict:
        """The record for `step`; `loss_sum`, `steps`, `samples`: the epoch's running totals
        (the loss may be a tensor: reading it here is the only host synchronisation)."""
        now = self.clock()
        loss_now = float(loss_sum)
        mark_loss, mark_steps, mark_samples, mark_time = self._mark
        self._mark = (loss_now, steps, samples, now)
        seconds = max(now - mark_time, 1e-9)
        done = step - self.first_step
        rate = (now - self.began) / done if done > 0 else None
        record = {"kind": "step", "step": step, "total_steps": self.total_steps, "epoch": epoch, "epochs": epochs,
                  "lr": lr, "samples_per_second": (samples - mark_samples) * self.data_parallel_size / seconds,
                  "eta_seconds": max(self.total_steps - step, 0) * rate if rate is not None else None}
        if self.loss_is_local and steps > mark_steps:
            record["train_loss"] = (loss_now - mark_loss) / (steps - mark_steps)
        return record


def format_eta(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    if seconds < 10:
        return f"{seconds:.1f}s"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
