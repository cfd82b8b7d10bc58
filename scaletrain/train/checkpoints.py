"""Checkpoints in the built-in trainer: when to save, what to resume, what to tell the user."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from ..checkpoint import CHECKPOINTS_DIR, Checkpointer
from ..foundation.errors import UsageError, arg

if TYPE_CHECKING:
    from ..run.run import Run


class TrainerCheckpoints:
    """Every `every` steps (0: never) into <out>/checkpoints; `resume` is None, "auto" or a
    path. A checkpoint falls between optimizer steps: with gradient accumulation a save that
    comes due in the middle of a cycle waits for its end, so nothing accumulated is lost."""

    def __init__(self, run: "Run", out: Path, every: int, keep: int, resume: Optional[str], say,
                 layout: str = "auto", notes_shown: bool = False, asynchronous: bool = False,
                 facts: Optional[dict] = None):
        """`notes_shown`: the command that started this run has already checked the
        checkpoint to resume and shown its notes (checkpoints skipped, settings changed)."""
        self.run, self.every, self.resume_from, self.say = run, every, resume, say
        self.notes_shown = notes_shown
        self.store = Checkpointer(run, Path(out) / CHECKPOINTS_DIR, keep, layout, asynchronous=asynchronous, say=say,
                                  facts=facts)
        self.last_saved = -1
        self.due = False
        self.resumed: Optional[dict] = None
        self.finite = None  # a NonFiniteGuard: asked before every save

    def resume(self, model, optimizer, loader, epochs: int) -> dict:
        """Restores the state to resume from, if any. Returns where the loop starts: the
        1-based epoch and that epoch's running totals (so its report covers all of it)."""
        start = {"epoch": 1, "loss_sum": 0.0, "steps": 0, "samples": 0}
        if not self.resume_from:
            return start
        resumed = self.store.load(self.resume_from, model, optimizer, loader=loader)
        if resumed is None:
            self.say(f"scaletrain: no checkpoint in {self.store.directory} yet; starting from step 0")
            return start
        self.resumed = resumed
        self.last_saved = resumed["step"]
        position = resumed["loader"] or {"epoch": 0, "batches_done": 0}
        totals = resumed["extra"].get("epoch_totals", {})
        # The loss average of the epoch covers all of it; the samples count only what this
        # process trains, because they are divided by this process's time (samples/s).
        start.update(loss_sum=totals.get("loss_sum", 0.0), steps=totals.get("steps", 0))
        start["epoch"] = position["epoch"] + 1
        if start["epoch"] > epochs:
            raise UsageError(f"{resumed['path']} is in epoch {start['epoch']} but this run trains {epochs} epoch(s); "
                             f"use {arg('epochs', start['epoch'])} or more to continue it")
        if not self.notes_shown:
            for note in resumed["notes"]:
                self.say(f"scaletrain: note: {note}")
        self.say(f"scaletrain: resumed from {resumed['path']} at step {resumed['step']} "
                 f"(epoch {start['epoch']}, {loader.position()['batches_done']} of {len(loader)} batches already done)")
        return start

    def at_boundary(self) -> bool:
        return self.run.accumulation_position()[0] == 0

    def after_step(self, model, optimizer, loader, totals: dict) -> None:
        if self.every and self.run.steps_taken % self.every == 0:
            self.due = True
        if self.due and self.at_boundary():
            self.save(model, optimizer, loader, totals)

    def at_end(self, model, optimizer, loader, totals: dict) -> None:
        """The final state too, so a finished run can be continued or compared."""
        if not self.every or self.last_saved == self.run.steps_taken:
            return
        if self.at_boundary():
            self.save(model, optimizer, loader, totals)
        else:
            micro, accum = self.run.accumulation_position()
            self.say(f"scaletrain: note: the last {micro} micro-step(s) did not complete an optimizer step "
                     f"({arg('grad_accum', accum)}); the last checkpoint is step {self.last_saved}")

    def finish(self) -> None:
        """The checkpoint still being written in the background is complete (or its failure
        said, on every rank) before the run reports its end."""
        if self.every:
            self.store.wait()

    def save(self, model, optimizer, loader, totals: dict) -> None:
        if self.finite is not None and not self.finite.check(self.run.steps_taken):
            # Going on despite NaN/inf (--allow-nonfinite): the last finite checkpoint stays the newest.
            kept = f"the newest checkpoint stays step {self.last_saved}" if self.last_saved >= 0 else "none is kept"
            self.say(f"scaletrain: note: no checkpoint at step {self.run.steps_taken}: the weights are not finite; "
                     f"{kept}")
            self.due = False
            return
        loss_sum = totals["loss_sum"]
        loss_mean = self.run.mean(loss_sum.detach().clone() if isinstance(loss_sum, torch.Tensor) else loss_sum)
        epoch_totals = {"loss_sum": float(loss_mean), "steps": int(totals["steps"]), "samples": int(totals["samples"])}
        self.store.save(self.run.steps_taken, model, optimizer, loader=loader, extra={"epoch_totals": epoch_totals})
        self.last_saved, self.due = self.run.steps_taken, False

    def summary(self) -> dict:
        facts = {"checkpoint_every": self.every, "checkpoint_async": self.store.asynchronous}
        if self.resumed is not None:
            facts.update(resumed_from=self.resumed["path"], resumed_at_step=self.resumed["step"])
        return facts
