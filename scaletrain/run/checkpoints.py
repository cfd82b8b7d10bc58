"""Checkpoints, as methods of `Run`: a Checkpointer for a folder, and saving and loading a
whole training state in one call. The checkpointer (checkpoint/) asks the run only what its
`Host` protocol names: this process's context, the topology, the steps taken, the loss
scaler, whose state a model is, the facts a checkpoint must agree with — and tells it, on
loading, the step it resumes at."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from ..checkpoint import DEFAULT_KEEP, Checkpointer
from ..parallel.model_state import ModuleState


class RunCheckpoints:
    """Mixed into Run: uses its `steps_taken`, `_prepared`, `strategy`, `world_size`,
    `data_parallel_size` and `background_saves`."""

    def checkpointer(self, directory, keep: int = DEFAULT_KEEP, layout: str = "auto",
                     asynchronous: bool = False) -> Checkpointer:
        """A Checkpointer writing into `directory` (keeps the newest `keep` checkpoints;
        layout "full", "sharded" or "auto": sharded for a large sharded model).
        `asynchronous=True`: each save returns once the state is in host memory, and the files
        are written while training goes on (one at a time; `run.close()` waits for the last)."""
        return Checkpointer(self, Path(directory), keep, layout, asynchronous=asynchronous)

    def save_checkpoint(self, directory, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
                        step: Optional[int] = None, scheduler=None, loader=None, extra: Optional[dict] = None,
                        keep: int = DEFAULT_KEEP, layout: str = "auto", asynchronous: bool = False) -> Path:
        """Saves model, optimizer, schedule, loader position, every rank's RNG state and the
        step into `directory`/step-N atomically. Every rank must call it. `asynchronous`:
        as `run.checkpointer`'s (the path returned is complete once written)."""
        return self.checkpointer(directory, keep, layout, asynchronous).save(
            self.steps_taken if step is None else step, model, optimizer, scheduler=scheduler, loader=loader,
            extra=extra)

    def load_checkpoint(self, source, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
                        scheduler=None, loader=None) -> Optional[dict]:
        """Restores what save_checkpoint saved, on any world size and strategy; `source` is a
        checkpoint folder, a folder of them (the newest complete one that verifies is used)
        or a run's output folder. Returns {"path", "step", "loader", "extra", "world_size",
        "notes"}. Every rank must call it."""
        return Checkpointer(self, Path(source)).load(Path(source), model, optimizer, scheduler=scheduler,
                                                     loader=loader)

    def _finish_background_save(self) -> None:
        """A checkpoint still being written is finished before the process group goes (its
        thread talks over it); one that failed and was never reported is said here."""
        if not self.background_saves.unsettled:
            return
        step = self.background_saves.step
        outcome, _ = self.background_saves.settle()
        if isinstance(outcome, BaseException):
            print(f"scaletrain: error: the checkpoint of step {step} could not be written: {outcome}; the previous "
                  "checkpoint is kept", file=sys.stderr, flush=True)

    # What the checkpoints need of the run (checkpoint.checkpointer.Host).
    def state_owner(self, model: nn.Module):
        found = self._prepared.get(id(model))
        return found if found is not None else ModuleState(model)

    def checkpoint_facts(self) -> dict:
        return {"strategy": self.strategy.name, "world_size": self.world_size,
                "data_parallel_size": self.data_parallel_size, "grad_accum": self.strategy.grad_accum}
