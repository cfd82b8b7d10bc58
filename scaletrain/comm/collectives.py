"""One collective at one message size: buffers made once, the operation run many times.

Sizes follow nccl-tests: for all_gather S is the gathered output (each rank gives S/n), for
reduce_scatter S is the input (each rank keeps S/n), for the rest S is each rank's buffer (for
all_to_all: each rank sends S/n to every rank and receives as much, as expert parallel's
dispatch does).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

DTYPE = torch.float32

# torch 2.13 renamed the tensor forms of all-gather and reduce-scatter; older ones lack the new names.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _elements(nbytes: int, n: int) -> int:
    """Elements of float32 in S bytes, rounded to a multiple of n (chunks must be equal)."""
    count = max(n, nbytes // DTYPE.itemsize)
    return count - count % n


def make_op(op: str, nbytes: int, device: torch.device) -> tuple[Callable[[], None], int]:
    """(a function running the collective once, the message size actually used in bytes)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    count = _elements(nbytes, n)
    size = count * DTYPE.itemsize
    if op == "all_reduce":
        buf = torch.ones(count, dtype=DTYPE, device=device)
        return (lambda: dist.all_reduce(buf)), size
    if op == "all_gather":
        out = torch.empty(count, dtype=DTYPE, device=device)
        part = torch.ones(count // n, dtype=DTYPE, device=device)
        return (lambda: _all_gather(out, part)), size
    if op == "reduce_scatter":
        full = torch.ones(count, dtype=DTYPE, device=device)
        part = torch.empty(count // n, dtype=DTYPE, device=device)
        return (lambda: _reduce_scatter(part, full)), size
    if op == "all_to_all":
        send = torch.ones(count, dtype=DTYPE, device=device)
        recv = torch.empty(count, dtype=DTYPE, device=device)
        return (lambda: dist.all_to_all_single(recv, send)), size
    if op == "broadcast":
        buf = torch.ones(count, dtype=DTYPE, device=device)
        return (lambda: dist.broadcast(buf, src=0)), size
    if op == "sendrecv":
        # A ring: every rank sends S bytes to the next and receives S from the previous.
        send = torch.ones(count, dtype=DTYPE, device=device)
        recv = torch.empty(count, dtype=DTYPE, device=device)

        def sendrecv() -> None:
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return sendrecv, size
    raise ValueError(op)
