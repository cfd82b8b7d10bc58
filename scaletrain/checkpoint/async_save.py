"""Asynchronous saves of a Checkpointer (`asynchronous=True`, `--checkpoint-async`).

The training step waits only while the state is copied into host memory; the files are
written by a thread while training goes on (background.py). Both layouts:

- sharded: every rank's share goes through DCP's asynchronous save
  (`torch.distributed.checkpoint.async_save`) from the host copy; when it is on disk each
  rank sends rank 0 its files' checksums and rank 0 publishes the checkpoint.
- full: the whole state is gathered onto rank 0 first (a collective, as in a synchronous
  save), copied into host memory there, and rank 0's thread writes `state.pt` and
  publishes it.

Publishing is the same as a synchronous save's (layout.publish): checksums, then COMPLETE,
then the rename, then `latest`. Until then the previous complete checkpoint stays the
newest, so a process killed while a save is being written resumes from that one.

Each function takes the Checkpointer (`ckpt`) whose save it carries out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..process import object_collectives
from . import checksums, layout, sharded
from .safe_io import CheckpointError, save_state


def settle(ckpt, reason: str) -> None:
    """Waits for this run's checkpoint in flight, if any, and makes its outcome every rank's:
    a save that failed raises CheckpointError here on every rank (collective: every rank has
    started the same saves). `reason`: what waits ("checkpoint at step 40"), for the line
    said when the wait was not instant."""
    saves = ckpt.host.background_saves
    if saves is None or not saves.unsettled:
        return
    step = saves.step
    outcome, waited = saves.settle()
    if waited >= 0.05:
        ckpt.say(f"scaletrain: note: {reason} waited {waited:.1f} s for the checkpoint of step {step} to finish "
                 "writing (at most one is written at a time)")
    mine = sharded.first_failure(outcome) if isinstance(outcome, BaseException) else None
    reports = object_collectives.gather_to_rank0(mine)
    first = next((r for r in reports if r), None) if reports else None
    problem = object_collectives.broadcast_from_rank0(first)
    if problem:
        raise CheckpointError(problem if problem.startswith("cannot write") else
                              f"the checkpoint of step {step} could not be written: {problem}")


def save_sharded(ckpt, step: int, owner, optimizer, small: dict) -> Path:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    saves = ckpt.host.background_saves
    rank = ckpt.host.ctx.rank
    staging = ckpt._attempt(lambda: layout.new_staging_folder(ckpt.directory, step)) if rank == 0 else None
    staging = ckpt._outcome(object_collectives.broadcast_from_rank0(staging))
    tensors, others = sharded.split_state(owner.state_dict(False, optimizer))
    staged = saves.staging.stage(tensors)
    group = saves.group()
    shards = staging / layout.SHARDS_DIR
    writer = FileSystemWriter(shards, single_file_per_rank=True, sync_files=True)
    future = _async_save(dcp, staged, writer, group)
    with_optimizer = optimizer is not None

    def finish() -> Any:
        from torch.distributed.checkpoint.api import CheckpointException

        failure = None
        try:
            (future.upload_completion if hasattr(future, "upload_completion") else future).result()
        except (Exception, CheckpointException) as exc:  # noqa: BLE001 - DCP reports a rank's failure to every rank
            failure = sharded.first_failure(exc)  # (DCP's CheckpointException is a BaseException)
        files = [] if failure else [f"{layout.SHARDS_DIR}/{name}" for name in sharded.shard_files(shards, rank)]
        mine = {"sums": checksums.checksums(staging, files), "others": others, "bytes": _bytes(staged),
                "failure": failure}
        reports = _gather(mine, group)
        if rank != 0:
            return None
        failure = next((r["failure"] for r in reports if r["failure"]), None)
        if failure:
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
            return ckpt._write_failure(OSError(failure), sum(r["bytes"] for r in reports))
        return ckpt._publish_sharded(step, staging, small, reports, with_optimizer)

    saves.start(step, finish)
    return ckpt.directory / layout.checkpoint_name(step)


def save_full(ckpt, step: int, owner, optimizer, small: dict) -> Path:
    saves = ckpt.host.background_saves
    state = owner.state_dict(True, optimizer)  # collective: the whole state gathered onto rank 0
    if ckpt.host.ctx.rank == 0:
        staged = saves.staging.stage({"model": state["model"],
                                      "optimizer": state["optimizer"] if optimizer is not None else None})
        whole = {**small, "layout": "full", **staged}
        needed = _bytes(staged)

        def finish() -> Any:
            return ckpt._write(step, lambda folder: save_state(whole, folder / layout.STATE_FILE), needed, "full",
                               small["progress"]["facts"], [layout.STATE_FILE])
    else:
        def finish() -> Any:
            return None
    saves.start(step, finish)
    return ckpt.directory / layout.checkpoint_name(step)


def _async_save(dcp, staged: dict, writer, group):
    """DCP's asynchronous save of a state already in host memory (torch before 2.8 has no
    `async_stager`: its writer then copies the state once more itself)."""
    try:
        return dcp.async_save(staged, storage_writer=writer, process_group=group, async_stager=_AlreadyStaged())
    except TypeError as exc:
        if "async_stager" not in str(exc):
            raise
        return dcp.async_save(staged, storage_writer=writer, process_group=group)


def _gather(obj: Any, group) -> list:
    """Every rank's `obj` on rank 0, over the writing threads' own group."""
    import torch.distributed as dist

    if group is None:
        return [obj]
    out = [None] * dist.get_world_size(group) if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0, group=group)
    return out or []


def _bytes(state: Any) -> int:
    import torch

    if isinstance(state, dict):
        return sum(_bytes(v) for v in state.values())
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state
        return local.numel() * local.element_size()
    return 0


class _AlreadyStaged:
    """DCP's stager for a state already in host memory: hands it on as it is (DCP's own
    stager would copy it a second time, into memory allocated for every save)."""

    _synchronize_after_execute = False

    @property
    def should_synchronize_after_execute(self) -> bool:
        return False

    def stage(self, state_dict):
        return state_dict

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        pass
