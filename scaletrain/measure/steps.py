"""The timed training loop that `bench` and `plan` share, and the per-step time breakdown.

A step is cut by marks into: data (waiting for the next batch), forward+backward (with the
gradients' synchronisation, on a "sync" step), optimizer (zero_grad, step and the learning-rate
schedule). Exposed communication is what a synchronised forward+backward takes longer than one
run inside `run.no_sync` (same work, no gradient communication); idle is the rest of the step's
wall time that none of the parts explains (loop overhead, waiting on another process).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Iterator, Optional

import torch

from .clock import Clock, median

SYNC, NOSYNC = "sync", "nosync"


def forever(loader: Iterable) -> Iterator:
    """Batches without end: each pass over the loader is a new epoch (a new order)."""
    while True:
        yield from loader


def timed_steps(run, model, optimizer, batches: Iterator, loss_fn: Callable, kinds: list[str], clock: Clock,
                scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None) -> None:
    """Runs one training step per entry of `kinds`, recording marks on `clock`. The same
    calls as `run.train_step`, split so that each part can be timed; nothing waits on the
    device (no .item()), so the measurement does not slow the steps down."""
    for kind in kinds:
        clock.start_step(kind)
        inputs, targets = next(batches)
        clock.mark("data")
        optimizer.zero_grad(set_to_none=True)
        if kind == NOSYNC:
            with run.no_sync(model):
                run.forward_backward(model, inputs, targets, loss_fn)
        else:
            run.forward_backward(model, inputs, targets, loss_fn)
        clock.mark("fb")
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        clock.mark("opt")
    clock.start_step("end")  # closes the last step's wall time


def steps_to_measure(run, clock: Clock, kind: str, wanted: int, min_seconds: float) -> int:
    """At least `wanted` steps, more when steps are short: enough to last `min_seconds` at the
    pace of the warm-up steps recorded on `clock` (a few milliseconds of steps are at the mercy
    of one hiccup of the machine). Every rank gets the same count: ranks must run the same
    number of synchronised steps."""
    walls = clock.step_walls(kind)
    pace = median(walls[len(walls) // 2:]) if walls else 0.0  # the later warm-up steps
    needed = max(wanted, math.ceil(min_seconds / pace)) if pace > 0 else wanted
    return max(wanted, math.ceil(run.mean(float(needed))))


def breakdown(clock: Clock, skip: int = 0, comm_clock: Optional[Clock] = None) -> dict:
    """Seconds per part of a step. `clock`: contiguous synchronised steps, as training runs
    them (`skip` warm-up steps left out): the step is their mean wall time (the wall time of
    them all ÷ their number: what training gets, hiccups included); data, forward+backward
    and optimizer are medians. `comm_clock`: blocks of synchronised and no-sync steps in
    turn, for the communication that a synchronised forward+backward adds (None: one
    process, nothing to synchronise)."""
    data = median(clock.intervals("start", "data", SYNC, skip))
    fb_sync = median(clock.intervals("data", "fb", SYNC, skip))
    optimizer = median(clock.intervals("fb", "opt", SYNC, skip))
    walls = clock.step_walls(SYNC, skip)
    step = sum(walls) / len(walls) if walls else float("nan")
    compute, exposed, nosync_steps = fb_sync, 0.0, 0
    if comm_clock is not None:
        blocks_sync = median(comm_clock.intervals("data", "fb", SYNC))
        nosync = comm_clock.intervals("data", "fb", NOSYNC)
        if nosync:
            compute = min(blocks_sync, median(nosync))
            exposed = max(0.0, blocks_sync - median(nosync))
            nosync_steps = len(nosync)
    return {
        "step_s": step,
        "data_s": data,
        "compute_s": compute,
        "exposed_comm_s": exposed,
        "optimizer_s": optimizer,
        "idle_s": max(0.0, step - data - fb_sync - optimizer),
        "measured_steps": len(walls),
        "nosync_steps": nosync_steps,
    }


PARTS = ("compute_s", "exposed_comm_s", "data_s", "optimizer_s", "idle_s")
