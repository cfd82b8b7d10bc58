"""The flags shared by the commands that measure and predict (`plan`, `bench`): what to train,
the machines, how noisy a machine may be; and the parts of a `PlanRequest` they give."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from ..foundation.defaults import BENCH_MAX_OTHER_CORES, BENCH_MEASURE_S, PLAN_BUDGET_S, PLAN_MAX_ERROR
from ..foundation.errors import UsageError
from ..workloads import BUILTIN
from .parsing import positive_float, positive_int


def add_model_arguments(p: argparse.ArgumentParser, default_workload: Optional[str], default_note: str = "") -> None:
    """The flags naming what to measure."""
    p.add_argument("--workload", default=default_workload, choices=list(BUILTIN), metavar="NAME",
                   help=f"built-in workload: {', '.join(BUILTIN)} ({default_note or 'default ' + str(default_workload)})")
    p.add_argument("--model", metavar="MODULE:FUNCTION", help="your model factory, returning a torch.nn.Module")
    p.add_argument("--dataset", metavar="MODULE:FUNCTION", help="your dataset factory (a Dataset or a (train, held_out) pair)")
    p.add_argument("--batch-size", type=positive_int,
                   help="samples per process per step (default 32; stdlib-gpt with --seq-len: as many as make 2,048 "
                        "tokens, at least 1)")
    p.add_argument("--seq-len", type=positive_int, metavar="S",
                   help="tokens per sequence of a language-model workload (stdlib-gpt: default 64); with --hardware "
                        "(plan): of the model planned (default 8192)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data order (default 0)")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl", "mpi", "ccl"], default="auto",
                   help="communication backend (default: nccl on CUDA, gloo on CPU)")
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")


def add_min_seconds_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-seconds", type=positive_float, default=BENCH_MEASURE_S, metavar="SECONDS",
                   help="more than --steps steps when they would not last this long: small models' steps take "
                        f"milliseconds (default {BENCH_MEASURE_S:g})")


def add_noise_arguments(p: argparse.ArgumentParser) -> None:
    """How a plan copes with a busy machine (the same names and meanings as bench's)."""
    p.add_argument("--budget", type=positive_float, default=PLAN_BUDGET_S, metavar="SECONDS",
                   help="more rounds while the expected error exceeds --max-error, until the next would end past "
                        f"this many seconds (default {PLAN_BUDGET_S:g})")
    p.add_argument("--max-error", type=positive_float, default=PLAN_MAX_ERROR, metavar="SHARE",
                   help="the widest expected error (a share: 0.5 is ±50%%) a plan answers with; wider, it says it "
                        f"cannot tell and names no best configuration (default {PLAN_MAX_ERROR:g})")
    add_max_other_load_argument(p)


def add_max_other_load_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-other-load", type=positive_float, default=BENCH_MAX_OTHER_CORES, metavar="CORES",
                   help="a round during which other processes kept more than this many cores busy is left out and "
                        f"run again (default {BENCH_MAX_OTHER_CORES:g})")


def add_prediction_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--comm", type=Path, metavar="FILE",
                   help="use the all_reduce results of `scaletrain comm --json` instead of a quick probe")
    p.add_argument("--link-gbps", type=positive_float, default=10.0,
                   help="network between machines, Gbit/s, for world sizes beyond one machine (default 10)")
    p.add_argument("--link-latency-us", type=positive_float, default=20.0,
                   help="network latency between machines, µs (default 20)")
    p.add_argument("--nproc-per-node", type=positive_int,
                   help="processes per machine (default: one per GPU, else one per CPU core)")
    p.add_argument("--overlap", type=float,
                   help="share (0-1) of compute that hides communication (default: 1 on GPUs, 0 on CPUs)")
    p.add_argument("--device-memory-gb", type=positive_float,
                   help="memory of one device (default: the GPU's, or this machine's RAM ÷ processes)")
    p.add_argument("--hosts", metavar="A:N,B:N",
                   help="measure across these machines (this one first, N processes on each; Open MPI's mpirun "
                        "starts the ranks over ssh): the jobs of several processes span them, and the network "
                        "between them is measured instead of assumed (--link-gbps, --link-latency-us)")
    p.add_argument("--hostfile", type=Path, metavar="FILE", help="the same as --hosts, as Open MPI's hostfile "
                   "lines 'host slots=N'")


def parse_int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected whole numbers separated by commas, e.g. {flag} 1,2") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} {text!r}: expected numbers of at least 1, e.g. {flag} 1,2")
    return sorted(set(values))


def parse_strategies(text: str) -> list[str]:
    """Registered strategy names."""
    from ..strategies import strategy_names

    names = [name.strip() for name in text.split(",") if name.strip()]
    known = strategy_names()
    for name in names:
        if name not in known:
            raise UsageError(f"unknown strategy {name!r}; choose from: {', '.join(known)} (--strategy)")
    if not names:
        raise UsageError(f"--strategy is empty; choose from: {', '.join(known)}")
    return names


def hosts_for(args: argparse.Namespace, default_world_sizes: Optional[str]):
    """The machines --hosts/--hostfile name (measure.jobs.Hosts), or None: everything on this
    one. Across hosts the processes per machine are the hosts' slots, and the world sizes are one
    process and every slot (the default when --world-sizes is not given): the flags say so
    (--nproc-per-node, --world-sizes) from here on."""
    from ..measure.jobs import hosts_from_args

    hosts = hosts_from_args(args)
    if hosts is None:
        return None
    if args.nproc_per_node is not None and args.nproc_per_node != hosts.slots:
        raise UsageError(f"--nproc-per-node {args.nproc_per_node} and {hosts.flag} ({hosts.slots} per host) differ; "
                         "drop --nproc-per-node: across hosts it is the hosts' slots")
    args.nproc_per_node = hosts.slots
    if args.world_sizes == default_world_sizes:
        args.world_sizes = f"1,{hosts.world_size}"
    # A job across the hosts uses every slot of every host: the layout the predictions assume
    # (each host's processes consecutive ranks).
    sizes = parse_int_list(args.world_sizes, "--world-sizes")
    wrong = [n for n in sizes if n not in (1, hosts.world_size)]
    if wrong:
        raise UsageError(f"--world-sizes {','.join(map(str, sizes))}: across {hosts.flag} the job fills every slot "
                         f"({len(hosts.hosts)} hosts × {hosts.slots}); use --world-sizes 1,{hosts.world_size}")
    return hosts


def training_of(args: argparse.Namespace, workload: Optional[str] = None):
    from ..plan import Training

    return Training(workload or args.workload, args.model, args.dataset, batch_size_of(args, workload), args.seed,
                    args.seq_len)


def batch_size_of(args: argparse.Namespace, workload: Optional[str] = None) -> int:
    """--batch-size, or the workload's (a language model's with --seq-len holds its tokens per batch)."""
    from ..workloads import get_workload

    if args.batch_size is not None:
        return args.batch_size
    return get_workload(workload or args.workload, args.model, args.dataset, args.seq_len).batch_size


def check_comm_file(path: Optional[Path]) -> None:
    if path is not None and not path.is_file():
        raise UsageError(f"--comm {path}: no such file; make it with `scaletrain comm --ops all_reduce --json`")
