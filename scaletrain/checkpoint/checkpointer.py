"""Saving and loading a whole training state, as one collective call on every rank.

The model's and optimizer's state come from the strategy that prepared the model (its
`state_dict(full)` / `load_state_dict`): this module knows nothing of strategies. Two
layouts on disk:

- full: the whole state gathered onto rank 0, which writes one `state.pt`; loads into any
  strategy on any number of processes. Rank 0 holds one full copy while saving.
- sharded: every rank writes its own share (torch.distributed.checkpoint); no rank ever
  holds the whole model. Needs a folder every rank can reach. The default for fsdp when
  the model's state is large (`defaults.SHARDED_CHECKPOINT_MIN_BYTES`).

Either way rank 0 writes the small things (step, data position, every rank's RNG state,
schedule), checksums of every file, and publishes the checkpoint atomically.
"""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from ..foundation.defaults import KEEP_CHECKPOINTS, SHARDED_CHECKPOINT_MIN_BYTES
from ..foundation.safe_files import write_json_atomic
from ..foundation.text_values import AUTO
from ..process import object_collectives
from ..version import __version__
from . import async_save, checksums, layout, sharded
from .host import Host, StateOwner
from .loading import CheckpointLoading
from .rng import capture_rng
from .safe_io import FORMAT, CheckpointError, save_state

DEFAULT_KEEP = KEEP_CHECKPOINTS
LAYOUTS = ("auto", "full", "sharded")


class Checkpointer(CheckpointLoading):
    """Writes checkpoints of one run into `directory` and finds them again.

        ckpt = run.checkpointer("runs/x/checkpoints", keep=2)
        resumed = ckpt.load("auto", model, optimizer, loader=loader)   # None: nothing to resume
        ...
        ckpt.save(step, model, optimizer, loader=loader)

    Every rank must make the same calls (they are collective). `layout`: "full", "sharded"
    or "auto" (sharded for a large sharded model, else full; asynchronous: sharded for any
    sharded model, whose gathering onto rank 0 would stop training).

    `asynchronous=True`: `save` returns once the state is copied into host memory and the
    files are written while training goes on (async_save.py); the checkpoint becomes the
    newest when it is complete. At most one is written at a time: the next save (or `load`,
    or `wait`) waits for it, and raises CheckpointError if it could not be written. The run
    waits for it at its end (`run.close()`); the interpreter too."""

    def __init__(self, host: Host, directory: Path, keep: int = DEFAULT_KEEP, layout_name: str = "auto",
                 asynchronous: bool = False, say: Optional[Callable[[str], None]] = None,
                 facts: Optional[dict] = None):
        """`facts`: what else a resume must agree with (compat.MUST_MATCH), recorded with each save."""
        if layout_name not in LAYOUTS:
            raise CheckpointError(f"checkpoint layout {layout_name!r}: choose one of {', '.join(LAYOUTS)}")
        self.host, self.directory, self.keep, self.layout = host, Path(directory), keep, layout_name
        self.asynchronous = asynchronous
        self.facts = dict(facts or {})
        self.say = say or (lambda line: host.print(line))

    # -- saving -----------------------------------------------------------------------
    def save(self, step: int, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
             scheduler=None, loader=None, extra: Optional[dict] = None) -> Path:
        """Saves everything needed to continue after `step`; returns the checkpoint folder."""
        micro, accum = self.host.accumulation_position()
        if micro:
            raise CheckpointError(f"a checkpoint is taken between optimizer steps, but this is micro-step {micro} of "
                                  f"{accum} of gradient accumulation (its gradients would be lost); save after the "
                                  "optimizer step")
        with self.host.watch("checkpoint save"):
            async_save.settle(self, f"the checkpoint at step {step}")
            owner = self.host.state_owner(model)
            small = self._small_state(step, scheduler, loader, extra)
            if self.asynchronous:
                save = async_save.save_sharded if self._sharded(owner) else async_save.save_full
                return save(self, step, owner, optimizer, small)
            if self._sharded(owner):
                return self._save_sharded(step, owner, optimizer, small)
            return self._save_full(step, owner, optimizer, small)

    def wait(self) -> Optional[Path]:
        """Waits for the checkpoint being written in the background, if any (every rank must
        call it); raises CheckpointError if it could not be written. Returns the newest
        complete checkpoint."""
        with self.host.watch("checkpoint wait"):
            async_save.settle(self, "the end of training")
        return layout.latest_checkpoint(self.directory)

    @property
    def in_flight(self) -> bool:
        """Whether a checkpoint is being written in the background right now."""
        return self.host.background_saves.in_flight

    def _sharded(self, owner: StateOwner) -> bool:
        if self.layout != AUTO:
            return self.layout == "sharded"
        shards = self.host.topology.shards_state  # no process holds the whole model
        if shards and self.asynchronous:  # gathering the whole state onto rank 0 would stop training
            return True
        state_bytes = 3 * sum(p.numel() * p.element_size() for p in owner.module.parameters())  # + Adam's two
        return bool(shards) and state_bytes >= SHARDED_CHECKPOINT_MIN_BYTES

    def _small_state(self, step, scheduler, loader, extra) -> dict:
        """What rank 0 writes besides the model: progress, facts, schedule, every RNG."""
        facts = {**self.host.checkpoint_facts(), **self.facts, "step": int(step)}
        if loader is not None:
            facts["batch_size"] = loader.batch_size
        progress = {"step": int(step), "world_size": self.host.ctx.world_size, "facts": facts}
        if loader is not None:
            progress["loader"] = loader.position()
        return {"format": FORMAT, "progress": progress, "rng": object_collectives.gather_to_rank0(capture_rng()),
                "scheduler": scheduler.state_dict() if scheduler is not None else None, "extra": extra or {},
                "loss_scale": self.host.scaler.state_dict()}  # fp16's scaler: None otherwise

    def _save_full(self, step, owner, optimizer, small) -> Path:
        state = owner.state_dict(True, optimizer)
        result: Any = None
        if self.host.ctx.rank == 0:
            whole = {**small, "layout": "full", "model": state["model"],
                     "optimizer": state["optimizer"] if optimizer is not None else None}
            result = self._write(step, lambda staging: save_state(whole, staging / layout.STATE_FILE),
                                 _tensor_bytes(state), "full", small["progress"]["facts"], [layout.STATE_FILE])
        return self._outcome(object_collectives.broadcast_from_rank0(result))

    def _save_sharded(self, step, owner, optimizer, small) -> Path:
        rank = self.host.ctx.rank
        staging = self._attempt(lambda: layout.new_staging_folder(self.directory, step)) if rank == 0 else None
        staging = self._outcome(object_collectives.broadcast_from_rank0(staging))
        tensors, others = sharded.split_state(owner.state_dict(False, optimizer))
        shards = staging / layout.SHARDS_DIR
        failure = None
        try:
            sharded.save(tensors, shards)
        except OSError as exc:  # every rank gets the same failure: DCP reports it to all
            failure = str(exc)
        files = [] if failure else [f"{layout.SHARDS_DIR}/{name}" for name in sharded.shard_files(shards, rank)]
        mine = {"sums": checksums.checksums(staging, files), "others": others, "bytes": _tensor_bytes(tensors)}
        reports = object_collectives.gather_to_rank0(mine)
        result: Any = None
        if rank == 0:
            if failure:
                shutil.rmtree(staging, ignore_errors=True)
                result = self._write_failure(OSError(failure), sum(r["bytes"] for r in reports))
            else:
                result = self._publish_sharded(step, staging, small, reports, optimizer is not None)
        return self._outcome(object_collectives.broadcast_from_rank0(result))

    def _publish_sharded(self, step, staging, small, reports, with_optimizer) -> Any:
        sums = {rel: value for report in reports for rel, value in report["sums"].items()}
        shards = staging / layout.SHARDS_DIR
        arrived = {rel.split("/", 1)[1] for rel in sums}
        expected = sharded.files_named_in_metadata(shards)
        if not expected <= arrived:
            shutil.rmtree(staging, ignore_errors=True)
            return CheckpointError(f"the sharded checkpoint in {self.directory} misses other ranks' files "
                                   f"({', '.join(sorted(expected - arrived)[:3])}): every rank must reach the same "
                                   "folder (a shared filesystem across nodes); use a shared --out, or the full layout")
        others: dict = {}
        for report in reports:
            others.update(report["others"])
        whole = {**small, "layout": "sharded", "optimizer_settings": others if with_optimizer else None}
        sums.update(checksums.checksums(staging, [f"{layout.SHARDS_DIR}/.metadata"]))

        def write(folder: Path) -> None:
            save_state(whole, folder / layout.STATE_FILE)
        return self._write(step, write, sum(r["bytes"] for r in reports), "sharded", small["progress"]["facts"],
                           [layout.STATE_FILE], staging=staging, sums=sums)

    def _write(self, step: int, write: Callable[[Path], None], needed: int, layout_name: str, facts: dict,
               files: list[str], staging: Optional[Path] = None, sums: Optional[dict] = None) -> Any:
        """Rank 0: assembles the folder and publishes it; returns the path, or the error
        every rank must raise."""
        try:
            staging = staging or layout.new_staging_folder(self.directory, step)
        except OSError as exc:
            return self._write_failure(exc, needed)
        try:
            write(staging)
            meta = {"step": int(step), "layout": layout_name, "facts": facts,
                    "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "scaletrain_version": __version__,
                    "torch_version": torch.__version__}
            write_json_atomic(staging / layout.META_FILE, meta)
            all_sums = {**(sums or {}), **checksums.checksums(staging, [*files, layout.META_FILE])}
            write_json_atomic(staging / checksums.CHECKSUM_FILE, all_sums)
            final = layout.publish(staging, self.directory, step)
        except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as a RuntimeError
            shutil.rmtree(staging, ignore_errors=True)
            return self._write_failure(exc, needed)
        layout.prune(self.directory, self.keep)
        return str(final)

    def _write_failure(self, exc: BaseException, needed: int) -> CheckpointError:
        """One line: what failed, where, and — for a full disk — how much room it needed."""
        try:
            free = shutil.disk_usage(self.directory if self.directory.exists() else self.directory.parent).free
        except OSError:
            free = None
        full_disk = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc) or (
            free is not None and free < needed)
        if full_disk:
            room = f"; {_mb(free)} free" if free is not None else ""
            return CheckpointError(f"cannot write a checkpoint into {self.directory}: the disk is full (it needs about "
                                   f"{_mb(needed)}{room}); {self._kept()}; free some space or write "
                                   "the run to a disk with room (another --out, or checkpoint folder)")
        reason = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0][:200]
        return CheckpointError(f"cannot write a checkpoint into {self.directory}: {reason}; {self._kept()}")

    def _kept(self) -> str:
        """What is left to resume from after a failed save: the previous checkpoint, where there is one."""
        previous = layout.latest_checkpoint(self.directory) if self.directory.exists() else None
        return f"the previous checkpoint ({previous.name}) is kept" if previous else "no checkpoint was written yet"

    @staticmethod
    def _attempt(make: Callable[[], Any]) -> Any:
        try:
            return make()
        except OSError as exc:
            return CheckpointError(f"cannot create a checkpoint folder: {exc.strerror or exc}")

    @staticmethod
    def _outcome(result: Any) -> Any:
        if isinstance(result, Exception):
            raise CheckpointError(str(result)) from None
        return Path(result) if isinstance(result, str) else result

def _tensor_bytes(state: dict) -> int:
    total = 0
    for value in state.values():
        if isinstance(value, dict):
            total += _tensor_bytes(value)
        elif isinstance(value, torch.Tensor):
            local = value.to_local() if hasattr(value, "to_local") else value
            total += local.numel() * local.element_size()
    return total


def _mb(nbytes: Optional[float]) -> str:
    return "? MB" if nbytes is None else f"{nbytes / 1e6:,.1f} MB"

