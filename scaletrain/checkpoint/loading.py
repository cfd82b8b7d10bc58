"""Loading a checkpoint, as methods of `Checkpointer`: rank 0 chooses the newest checkpoint
whose files verify and whose facts fit this run, every rank learns the choice, and the state
is restored — the full layout from rank 0's one file, the sharded one from every rank's share
— after every rank agreed that the checkpoint holds this model (a rank that stopped alone
would leave the others waiting in the next collective)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from ..foundation.text_values import AUTO
from ..process import object_collectives
from . import async_save, checksums, compat, layout, sharded
from .rng import restore_rng
from .safe_io import CheckpointError, load_state


class CheckpointLoading:
    """Mixed into Checkpointer: uses its `host` and `directory`."""


    def load(self, source: str | Path, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
             scheduler=None, loader=None) -> Optional[dict]:
        """Restores the state saved in `source` ("auto": this checkpointer's newest, if any;
        else a checkpoint folder, a folder of checkpoints, or a run's output folder). The
        newest checkpoint whose files verify is used; the ones skipped are named in "notes".

        Returns {"path", "step", "loader", "extra", "world_size", "notes"}, or None when
        `source` is "auto" and there is nothing to resume from."""
        with self.host.watch("checkpoint load"):
            async_save.settle(self, "loading a checkpoint")
            header, state = self._choose(source, loader) if self.host.ctx.rank == 0 else (None, None)
            header = object_collectives.broadcast_from_rank0(header)
            if isinstance(header, Exception):
                raise CheckpointError(str(header)) from None
            if header is None:
                return None
            owner = self.host.state_owner(model)
            if header["layout"] == "sharded":
                self._load_sharded(header, owner, optimizer)
            else:
                self._load_full(header, state, owner, optimizer)
        if scheduler is not None and header["scheduler"] is not None:
            scheduler.load_state_dict(header["scheduler"])
        self.host.scaler.load_state_dict(header.get("loss_scale"))
        rng = header["rng"]
        if self.host.ctx.rank < len(rng):  # a rank that did not exist when saving keeps its seeded state
            restore_rng(rng[self.host.ctx.rank])
        progress = header["progress"]
        if loader is not None and progress.get("loader") is not None:
            loader.resume_at(progress["loader"])
        self.host.resume_at(progress["step"])
        return {"path": header["path"], "step": progress["step"], "loader": progress.get("loader"),
                "extra": header["extra"], "world_size": progress.get("world_size"), "notes": header["notes"]}

    def _choose(self, source, loader) -> tuple[Any, Optional[dict]]:
        """Rank 0: (the first candidate that verifies and fits this run, as a header for all
        ranks — or None, or the error every rank raises; the state read from it)."""
        auto = str(source) == AUTO
        found, notes = layout.candidates(self.directory) if auto else layout.source_candidates(Path(source))
        if not found:
            if auto:
                return None, None
            return CheckpointError(f"no complete checkpoint at {source}; name a checkpoint folder "
                                   f"(…/checkpoints/step-N), a checkpoints folder or a run's output folder"), None
        now = {**self.host.checkpoint_facts(), **self.facts}
        if loader is not None:
            now["batch_size"] = loader.batch_size
        skipped = []
        for folder in found:
            problem = checksums.verify(folder)
            state = None
            if problem is None:
                try:
                    state = load_state(folder / layout.STATE_FILE)
                except CheckpointError as exc:
                    problem = str(exc)
            if problem is not None:
                skipped.append(f"skipped {folder.name}: {problem}")
                continue
            refusal, differences = compat.compare(state["progress"].get("facts", {}), now, str(folder))
            if refusal:
                return CheckpointError(refusal), None
            return {"path": str(folder), "layout": state.get("layout", "full"), "progress": state["progress"],
                    "scheduler": state.get("scheduler"), "rng": state.get("rng") or [], "extra": state.get("extra") or {},
                    "loss_scale": state.get("loss_scale"),
                    "has_optimizer": state.get("optimizer", state.get("optimizer_settings")) is not None,
                    "optimizer_settings": state.get("optimizer_settings"),
                    "notes": [*notes, *skipped, *differences]}, state
        return CheckpointError(f"no checkpoint in {source if not auto else self.directory} can be used: "
                               + "; ".join(skipped)), None

    def _load_full(self, header, state, owner, optimizer) -> None:
        if self.host.ctx.rank == 0:
            expected = _shapes(owner.module)
            problem = _mismatch(expected, state["model"], header["path"])
            whole = {"model": state["model"], "optimizer": state["optimizer"]}
        else:
            problem, whole = None, {"model": {}, "optimizer": {} if header["has_optimizer"] else None}
        problem = _consensus(problem)
        if problem:
            raise CheckpointError(problem)
        owner.load_state_dict(whole, True, optimizer if header["has_optimizer"] else None)

    def _load_sharded(self, header, owner, optimizer) -> None:
        with_optimizer = header["has_optimizer"] and optimizer is not None
        template = owner.state_dict(False, optimizer if with_optimizer else None)
        tensors, others = sharded.split_state(template)
        folder = Path(header["path"]) / layout.SHARDS_DIR
        stored = sharded.stored_shapes(folder)
        problem = _consensus(_mismatch({k: tuple(v.shape) for k, v in tensors.items()}, stored, header["path"],
                                       prefixed=True))
        if problem:
            raise CheckpointError(problem)
        sharded.load(tensors, folder)
        settings = header["optimizer_settings"] or {}
        state = sharded.join_state(tensors, {k: settings.get(k, v) for k, v in others.items()}, with_optimizer)
        owner.load_state_dict(state, False, optimizer if with_optimizer else None)


def _shapes(module: nn.Module) -> dict:
    return {name: tuple(t.shape) for name, t in module.state_dict().items() if isinstance(t, torch.Tensor)}


def _mismatch(expected: dict, stored: dict, where: str, prefixed: bool = False) -> Optional[str]:
    """What keeps `stored` (name -> tensor or shape) from filling `expected` (name -> shape)."""
    def shape(v):
        return tuple(v.shape) if isinstance(v, torch.Tensor) else tuple(v)
    missing = [k for k in expected if k not in stored]
    wrong = [k for k in expected if k in stored and shape(stored[k]) != expected[k]]
    if not missing and not wrong:
        return None
    names = [k.split(".", 1)[1] if prefixed else k for k in (missing or wrong)][:3]
    what = "does not hold" if missing else "holds other shapes for"
    return (f"{where} {what} {', '.join(names)}{' …' if len(missing or wrong) > 3 else ''}: it was written for another "
            "model; resume with the model it was written for, or start a new run")


def _consensus(problem: Optional[str]) -> Optional[str]:
    """The first rank's problem, on every rank: a rank that stopped alone would leave the
    others waiting in the next collective."""
    reports = object_collectives.gather_to_rank0(problem)
    first = next((p for p in reports if p), None) if reports else None
    return object_collectives.broadcast_from_rank0(first)


