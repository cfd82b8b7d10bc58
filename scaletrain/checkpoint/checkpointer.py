"""Saving and loading a whole training state, as one collective call on every rank.

Rank 0 writes and reads the files; the other ranks send it their share (gathered model
shards, their random-number states) or receive theirs from it, so the checkpoint folder only
has to be on rank 0's machine and a checkpoint written by N processes loads into M.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.distributed as dist
from torch import nn

from ..defaults import KEEP_CHECKPOINTS
from ..files import write_json_atomic
from ..version import __version__
from . import layout
from .safe_io import CheckpointError, load_state, save_state
from .state import apply_model_and_optimizer, capture_rng, gather_model_and_optimizer, restore_rng

if TYPE_CHECKING:
    from ..api import Run

DEFAULT_KEEP = KEEP_CHECKPOINTS


def _distributed() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _gather_objects(obj: Any) -> list:
    """Every rank's `obj`, on rank 0 (others get [])."""
    if not _distributed():
        return [obj]
    out = [None] * dist.get_world_size() if _rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out or []


def _from_rank0(obj: Any) -> Any:
    if not _distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class Checkpointer:
    """Writes checkpoints of one run into `directory` and finds them again.

        ckpt = Checkpointer(run, "runs/x/checkpoints", keep=2)
        resumed = ckpt.load("auto", model, optimizer, loader=loader)   # None: nothing to resume
        ...
        ckpt.save(step, model, optimizer, loader=loader)

    Every rank must make the same calls (they are collective)."""

    def __init__(self, run: "Run", directory: Path, keep: int = DEFAULT_KEEP):
        self.run = run
        self.directory = Path(directory)
        self.keep = keep

    # -- saving -----------------------------------------------------------------------
    def save(self, step: int, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
             scheduler=None, loader=None, extra: Optional[dict] = None) -> Path:
        """Saves everything needed to continue after `step`; returns the checkpoint folder."""
        with self.run._op("checkpoint save"):
            return self._save(step, model, optimizer, scheduler, loader, extra)

    def _save(self, step, model, optimizer, scheduler, loader, extra) -> Path:
        model_state, optim_state = gather_model_and_optimizer(model, optimizer)
        rng_states = _gather_objects(capture_rng())
        result: Any = None
        if _rank() == 0:
            try:
                result = self._write(step, model_state, optim_state, rng_states, scheduler, loader, extra)
            except OSError as exc:
                result = OSError(f"cannot write checkpoint into {self.directory}: {exc.strerror or exc}")
        result = _from_rank0(str(result) if not isinstance(result, Exception) else result)
        if isinstance(result, Exception):
            raise CheckpointError(str(result)) from None
        return Path(result)

    def _write(self, step, model_state, optim_state, rng_states, scheduler, loader, extra) -> Path:
        progress = {"step": int(step), "world_size": self.run.world_size}
        if loader is not None:
            progress["loader"] = loader.position()
        state = {"format": 1, "model": model_state, "optimizer": optim_state or None,
                 "scheduler": scheduler.state_dict() if scheduler is not None else None,
                 "rng": rng_states, "progress": progress, "extra": extra or {}}
        staging = layout.new_staging_folder(self.directory, step)
        try:
            save_state(state, staging / layout.STATE_FILE)
            meta = {"step": int(step), "world_size": self.run.world_size, "strategy": self.run.strategy.name,
                    "loader": progress.get("loader"), "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "scaletrain_version": __version__, "torch_version": torch.__version__}
            write_json_atomic(staging / layout.META_FILE, meta)
            final = layout.publish(staging, self.directory, step)
        except BaseException:
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
            raise
        layout.prune(self.directory, self.keep)
        return final

    # -- loading ----------------------------------------------------------------------
    def load(self, source: str | Path, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
             scheduler=None, loader=None) -> Optional[dict]:
        """Restores the state saved in `source` ("auto": this checkpointer's newest, if any;
        else a checkpoint folder, a folder of checkpoints, or a run's output folder).

        Returns {"path", "step", "loader", "extra", "world_size"}, or None when `source` is
        "auto" and there is nothing to resume from."""
        with self.run._op("checkpoint load"):
            resumed = self._load(source, model, optimizer, scheduler, loader)
        if resumed is not None:
            self.run.steps_taken = resumed["step"]
            if self.run._watchdog is not None:
                self.run._watchdog.step = resumed["step"]
        return resumed

    def _load(self, source, model, optimizer, scheduler, loader) -> Optional[dict]:
        header: Any = None
        state: Optional[dict] = None
        if _rank() == 0:
            try:
                state, header = self._read(source)
            except CheckpointError as exc:
                header = exc
        header = _from_rank0(header)
        if isinstance(header, Exception):
            raise CheckpointError(str(header)) from None
        if header is None:
            return None
        model_state = state["model"] if state is not None else {}
        optim_state = state.get("optimizer") if state is not None else {}
        if optimizer is not None and header["has_optimizer"]:
            apply_model_and_optimizer(model, optimizer, model_state, optim_state or {})
        else:
            apply_model_and_optimizer(model, None, model_state, None)
        if scheduler is not None and header["scheduler"] is not None:
            scheduler.load_state_dict(header["scheduler"])
        rng = header["rng"]
        if self.run.rank < len(rng):  # a rank that did not exist when saving keeps its seeded state
            restore_rng(rng[self.run.rank])
        progress = header["progress"]
        if loader is not None and progress.get("loader") is not None:
            loader.resume_at(progress["loader"])
        return {"path": header["path"], "step": progress["step"], "loader": progress.get("loader"),
                "extra": header["extra"], "world_size": progress.get("world_size")}

    def _read(self, source: str | Path):
        if str(source) == "auto":
            folder = layout.latest_checkpoint(self.directory)
            if folder is None:
                return None, None
        else:
            folder = layout.resolve_source(Path(source))
            if folder is None:
                raise CheckpointError(f"no complete checkpoint at {source}; name a checkpoint folder "
                                      f"(…/checkpoints/step-N), a checkpoints folder or a run's --out folder")
        state = load_state(folder / layout.STATE_FILE)
        header = {"path": str(folder), "progress": state.get("progress", {"step": 0}),
                  "rng": state.get("rng") or [], "scheduler": state.get("scheduler"),
                  "extra": state.get("extra") or {}, "has_optimizer": state.get("optimizer") is not None}
        return state, header
