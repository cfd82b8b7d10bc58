"""The sharded format: every rank writes its own share of the model and optimizer tensors
with torch.distributed.checkpoint (DCP), so no rank ever holds the whole model, and DCP
re-shards on load, so a checkpoint written by N processes loads into M.

Only tensors go to DCP (one flat dict, `model.<name>` and `optimizer.<key>`); the
optimizer's other settings (learning rates, betas: small numbers) travel with the rest of
the state in `state.pt`, which the restricted unpickler reads. Replicated tensors (DDP's
copies, a pipeline's replicas) are written once: DCP's planner de-duplicates them.

The ranks must share the checkpoint folder (a shared filesystem across nodes); rank 0
checks that every rank's file arrived before the checkpoint is published.

DCP is imported when a sharded checkpoint is written or read, not with this module: it
takes most of a second, which a run that never uses the format should not pay.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .safe_io import CheckpointError


def split_state(state: dict) -> tuple[dict, dict]:
    """(the tensors, flat under `model.`/`optimizer.` keys; the optimizer's other values)."""
    tensors = {f"model.{k}": v for k, v in state["model"].items()}
    others = {}
    for k, v in (state.get("optimizer") or {}).items():
        if isinstance(v, torch.Tensor):
            tensors[f"optimizer.{k}"] = v
        else:
            others[k] = v
    return tensors, others


def join_state(tensors: dict, others: dict, with_optimizer: bool) -> dict:
    """The inverse of split_state."""
    model = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    optimizer = {k[len("optimizer."):]: v for k, v in tensors.items() if k.startswith("optimizer.")}
    optimizer.update(others)
    return {"model": model, "optimizer": optimizer if with_optimizer else None}


def save(tensors: dict, folder: Path) -> None:
    """Collective: every rank writes its share into `folder`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.save(tensors, storage_writer=FileSystemWriter(folder, single_file_per_rank=True, sync_files=True))
    except CheckpointException as exc:
        raise OSError(first_failure(exc)) from None


def load(template: dict, folder: Path) -> None:
    """Collective: fills `template` (this process's tensors, in their current layout) from
    `folder`, reading only what this process holds. The caller has checked that the
    checkpoint holds every key of `template` (stored_shapes), on every rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from .dcp_reading import SafeLoadPlanner, SafeReader

    try:
        dcp.load(template, storage_reader=SafeReader(folder), planner=SafeLoadPlanner())
    except CheckpointException as exc:
        raise CheckpointError(f"cannot read the shards in {folder}: {first_failure(exc)}") from None


def shard_files(folder: Path, rank: int) -> list[str]:
    """The files rank `rank` wrote (DCP names them __<rank>_<n>.distcp)."""
    return sorted(p.name for p in folder.glob(f"__{rank}_*.distcp"))


def stored_shapes(folder: Path) -> dict:
    """The global shape of every tensor the checkpoint holds, from its metadata."""
    from .dcp_reading import load_metadata

    metadata = load_metadata(folder / ".metadata")
    return {k: tuple(v.size) for k, v in metadata.state_dict_metadata.items() if hasattr(v, "size")}


def files_named_in_metadata(folder: Path) -> set[str]:
    from .dcp_reading import load_metadata

    metadata = load_metadata(folder / ".metadata")
    return {info.relative_path for info in (metadata.storage_data or {}).values()}


def first_failure(exc: BaseException) -> str:
    """One line: the first rank's failure of DCP's CheckpointException (whose own text holds
    every rank's traceback), or an exception's first line."""
    failures = getattr(exc, "failures", {}) or {}
    for rank, failure in sorted(failures.items()):
        failure = failure[0] if isinstance(failure, tuple) else failure  # (exception, its traceback)
        return f"rank {rank}: {_first_line(failure)}"
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
