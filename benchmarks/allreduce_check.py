"""Checks `scaletrain comm` against a hand-timed torch.distributed.all_reduce loop.

    flock /tmp/scaletrain-bench.lock python benchmarks/allreduce_check.py [--size 16M] [--rounds 3]

Each round runs both, one after the other and in alternating order, on 2 processes with
Gloo: `scaletrain comm --ops all_reduce --sizes SIZE --json`, and a plain loop (this file,
under torchrun) that times ITERS all_reduce calls of SIZE bytes with time.perf_counter and
takes the slowest rank's time. Prints each round's bus bandwidth from both, their medians
and the ratio; exits 1 when the medians differ by more than 10%.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def hand_timed(size: int, iters: int, warmup: int) -> None:
    """One rank of the plain loop (run by torchrun): rank 0 prints the bus bandwidth in GB/s."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    n = dist.get_world_size()
    tensor = torch.ones(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        busbw = tensor.numel() * 4 / seconds.item() * 2 * (n - 1) / n / 1e9
        print(json.dumps({"seconds": seconds.item(), "busbw_gbps": busbw}), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_hand_loop(size: int, iters: int, warmup: int) -> float:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), __file__, "--worker", "--size", str(size), "--iters", str(iters),
           "--warmup", str(warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["busbw_gbps"]


def run_comm(size: int, iters: int, warmup: int) -> float:
    cmd = [sys.executable, "-m", "scaletrain", "comm", "--ops", "all_reduce", "--sizes", str(size), "--iters",
           str(iters), "--warmup", str(warmup), "--budget", "1000", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), check=True).stdout
    return json.loads(out)["results"][0]["busbw_gbps"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="16M", help="message size (default 16M = 16 MiB)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from scaletrain.comm.bandwidth import parse_size

    size = parse_size(args.size)
    if args.worker:
        hand_timed(size, args.iters, args.warmup)
        return 0
    comm, hand = [], []
    for round_index in range(args.rounds):
        first, second = (run_comm, run_hand_loop) if round_index % 2 == 0 else (run_hand_loop, run_comm)
        results = {first: first(size, args.iters, args.warmup), second: second(size, args.iters, args.warmup)}
        comm.append(results[run_comm])
        hand.append(results[run_hand_loop])
        print(f"round {round_index + 1}: scaletrain comm {comm[-1]:.3f} GB/s, hand-timed loop {hand[-1]:.3f} GB/s")
    c, h = statistics.median(comm), statistics.median(hand)
    print(f"all_reduce {args.size}, 2 processes, gloo: bus bandwidth, median of {args.rounds}: "
          f"scaletrain comm {c:.3f} GB/s, hand-timed torch.distributed.all_reduce {h:.3f} GB/s, "
          f"ratio {c / h:.3f}")
    return 0 if abs(c / h - 1) <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
