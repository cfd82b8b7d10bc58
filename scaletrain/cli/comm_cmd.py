"""`scaletrain comm`: time all_reduce, all_gather, reduce_scatter, broadcast and send/recv over
message sizes, and report algorithm and bus bandwidth (as nccl-tests does).

Not launched: checks the flags and starts its own job of --nproc processes (spawn). Started
by a launcher (torchrun, mpirun, srun): is one rank of that job.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..comm.bandwidth import OPS, bus_factor, parse_sizes
from ..foundation.errors import UsageError
from ..foundation.text_values import AUTO
from .parsing import positive_float, positive_int

NAME = "comm"
HELP = "benchmark the collectives (all_reduce, all_gather, ...): time, algorithm and bus bandwidth"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=positive_int, default=2, help="processes in the job (default 2)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated collectives (default: {','.join(OPS)})")
    p.add_argument("--sizes", default="1K:16M",
                   help="message sizes: a list (1K,1M,16M) or a range LOW:HIGH in powers of 4 (default 1K:16M)")
    p.add_argument("--iters", type=positive_int, default=20, help="timed runs per size, at most (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs per size first (default 3)")
    p.add_argument("--budget", type=positive_float, default=1.0,
                   help="seconds to spend per size at most; large messages get fewer runs (default 1)")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl", "mpi", "ccl"], default="auto",
                   help="communication backend (default: nccl on CUDA, gloo on CPU)")
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--out", type=Path, help="also write the JSON results to this file")
    p.add_argument("--quiet", action="store_true", help="print nothing (with --out: only write the file)")


def parse_ops(text: str) -> list[str]:
    ops = [op.strip() for op in text.split(",") if op.strip()]
    if not ops:
        raise UsageError(f"--ops is empty; choose from: {', '.join(OPS)}")
    for op in ops:
        bus_factor(op, 2)  # raises UsageError naming the choices
    return ops


def validate(args: argparse.Namespace) -> None:
    from ..process.backends import choose_backend
    from ..process.devices import choose_device

    ops, sizes = parse_ops(args.ops), parse_sizes(args.sizes)
    if args.warmup < 0:
        raise UsageError(f"--warmup {args.warmup}: must be 0 or more")
    device = choose_device(None if args.device == AUTO else args.device, 0)
    choose_backend(None if args.backend == AUTO else args.backend, device.type)
    check_memory(ops, max(sizes), args.nproc, device)
    if args.out is not None:
        parent = args.out.expanduser().absolute().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise UsageError(f"--out {args.out}: folder {parent} does not exist or cannot be written")


def check_memory(ops: list[str], size: int, nproc: int, device) -> None:
    """The largest message's buffers must fit: on CPU all the processes' together in the
    machine's available memory, on a GPU each process's in its device's free memory.
    Otherwise the ranks would die deep in the allocator."""
    import torch

    from ..comm.bandwidth import buffer_bytes, human_bytes
    from ..process.cores import available_memory_bytes

    op = max(ops, key=lambda o: buffer_bytes(o, size, nproc))
    per_rank = buffer_bytes(op, size, nproc)
    if device.type == "cuda":
        free, holders, where = torch.cuda.mem_get_info(device)[0], 1, f"{device} has"
    else:
        free, holders, where = available_memory_bytes(), nproc, "this machine has"
    if free is None or per_rank * holders <= free:
        return
    most = _flag_size(int(free / holders / (per_rank / size)))
    need = f"{human_bytes(per_rank)} of buffers in each of the {nproc} processes" + (
        f" ({human_bytes(per_rank * holders)} in all)" if holders > 1 else "")
    raise UsageError(f"--sizes: {op} of {human_bytes(size)} needs about {need}, but {where} {human_bytes(free)} "
                     f"available; choose sizes up to about {most} (e.g. --sizes 1K:{most})")


def _flag_size(nbytes: int) -> str:
    """A size as --sizes reads it, rounded down: 11G, 640M, 12K."""
    for unit, size in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return str(max(1, nbytes))


def be_a_rank(args: argparse.Namespace) -> int:
    from ..api import init
    from ..comm.report import print_json, print_table, result_document
    from ..comm.runner import benchmark
    from ..foundation.safe_files import write_json_atomic

    with init(strategy="ddp", backend=None if args.backend == AUTO else args.backend,
              device=None if args.device == AUTO else args.device) as run:
        if run.world_size < 2:
            raise UsageError("collectives need at least 2 processes; use --nproc 2 or more")
        rows = benchmark(parse_ops(args.ops), parse_sizes(args.sizes), run.device, args.iters, args.warmup,
                         args.budget)
        if run.is_main:
            doc = result_document(rows, run.backend, str(run.device), run.world_size)
            if args.out is not None:
                write_json_atomic(args.out, doc)
            if not args.quiet:
                (print_json if args.json else print_table)(doc)
        run.barrier()
    return 0


def run(args: argparse.Namespace) -> int:
    from ..process.environment import detect
    from ..measure.jobs import run_job

    validate(args)
    if detect(os.environ).launched:
        return be_a_rank(args)
    if args.nproc < 2:
        raise UsageError(f"--nproc {args.nproc}: collectives need at least 2 processes; use --nproc 2")
    return run_job(list(args.argv), args.nproc)
