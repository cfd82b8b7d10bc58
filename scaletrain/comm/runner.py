"""Timing the collectives inside a job, as one of its ranks.

For each operation and size: a few warm-up runs, a barrier so that every rank starts
together, then `iters` runs back to back timed as one block (one device synchronisation
at the end, as nccl-tests does). A rank's time per run is the block's time ÷ iters; the
reported time is the slowest rank's, because a collective is finished only when every
rank has finished it.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .bandwidth import algbw, busbw
from .collectives import make_op


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_op(op: str, nbytes: int, device: torch.device, iters: int, warmup: int) -> dict:
    run_once, size = make_op(op, nbytes, device)
    for _ in range(warmup):
        run_once()
    _sync(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run_once()
    _sync(device)
    seconds = (time.perf_counter() - start) / iters
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    seconds = slowest.item()
    n = dist.get_world_size()
    return {"op": op, "bytes": size, "seconds": seconds, "algbw_gbps": algbw(size, seconds) / 1e9,
            "busbw_gbps": busbw(op, size, seconds, n) / 1e9, "world_size": n, "iters": iters}


def iterations_for(op: str, nbytes: int, device: torch.device, iters: int, budget_s: float) -> int:
    """At most `iters`, fewer for large messages so that one size takes about `budget_s`
    (at least 3): a 64 MB all-reduce over Gloo takes a tenth of a second."""
    run_once, _ = make_op(op, nbytes, device)
    _sync(device)
    start = time.perf_counter()
    run_once()
    _sync(device)
    guess = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    dist.all_reduce(guess, op=dist.ReduceOp.MAX)  # every rank must choose the same count
    return int(max(3, min(iters, budget_s / max(guess.item(), 1e-6))))


def benchmark(ops: list[str], sizes: list[int], device: torch.device, iters: int, warmup: int,
              budget_s: float = 1.0) -> list[dict]:
    rows = []
    for op in ops:
        for nbytes in sizes:
            count = iterations_for(op, nbytes, device, iters, budget_s)
            rows.append(time_op(op, nbytes, device, count, warmup))
    return rows
