"""Small object collectives around rank 0, the same with one process or many: what
checkpoints and state hand-overs need (the big tensors go through torch's own calls)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist


def _distributed() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def gather_to_rank0(obj: Any) -> list:
    """Every rank's `obj` in rank order, on rank 0; the others get []."""
    if not _distributed():
        return [obj]
    out = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out or []


def broadcast_from_rank0(obj: Any) -> Any:
    """Rank 0's `obj`, on every rank."""
    if not _distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def scatter_from_rank0(objs: list) -> Any:
    """objs[r] on rank r (only rank 0's list is read)."""
    if not _distributed():
        return objs[0]
    box = [None]
    dist.scatter_object_list(box, objs if dist.get_rank() == 0 else None, src=0)
    return box[0]
