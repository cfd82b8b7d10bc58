"""`scaletrain plan`: measure one process and one collective, then predict step time, speedup,
efficiency and memory per device for each strategy and world size, including sizes this
machine does not have."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import UsageError
from ..workloads import BUILTIN
from .parsing import positive_float, positive_int

NAME = "plan"
HELP = "predict speedup, efficiency and memory per device for each strategy and world size, before running"


def parse_int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected whole numbers separated by commas, e.g. {flag} 1,2") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} {text!r}: expected numbers of at least 1, e.g. {flag} 1,2")
    return sorted(set(values))


def add_model_arguments(p: argparse.ArgumentParser, default_workload: str | None, default_note: str = "") -> None:
    """The flags naming what to measure; `bench` uses them too."""
    p.add_argument("--workload", default=default_workload, choices=list(BUILTIN), metavar="NAME",
                   help=f"built-in workload: {', '.join(BUILTIN)} ({default_note or 'default ' + str(default_workload)})")
    p.add_argument("--model", metavar="MODULE:FUNCTION", help="your model factory, returning a torch.nn.Module")
    p.add_argument("--dataset", metavar="MODULE:FUNCTION", help="your dataset factory (a Dataset or a (train, held_out) pair)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="samples per process per step (default 32)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data order (default 0)")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl", "mpi", "ccl"], default="auto",
                   help="communication backend (default: nccl on CUDA, gloo on CPU)")
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")


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
    p.add_argument("--microbatches", type=positive_int, default=4, help="pipeline micro-batches per step (default 4)")
    p.add_argument("--probe-rounds", type=positive_int, default=2,
                   help="alternating passes over the thread counts when measuring compute (default 2)")
    p.add_argument("--device-memory-gb", type=positive_float,
                   help="memory of one device (default: the GPU's, or this machine's RAM ÷ processes)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..plan.predict import COST_MODELS

    add_model_arguments(p, "synthetic-cnn")
    p.add_argument("--strategy", default=",".join(COST_MODELS),
                   help=f"comma-separated strategies to predict (default: {','.join(COST_MODELS)})")
    p.add_argument("--world-sizes", default="1,2,8,16,64", help="process counts to predict (default 1,2,8,16,64)")
    add_prediction_arguments(p)
    p.add_argument("--steps", type=positive_int, default=20, help="measured steps per thread count (default 20)")
    p.add_argument("--warmup", type=positive_int, default=3, help="steps left out first (default 3)")
    p.add_argument("--json", action="store_true", help="print the measurements and predictions as JSON")


def options_from_args(args: argparse.Namespace, device_type: str):
    from ..plan.make import default_options

    if args.overlap is not None and not 0 <= args.overlap <= 1:
        raise UsageError(f"--overlap {args.overlap}: must be between 0 and 1")
    return default_options(device_type, args.nproc_per_node, args.link_gbps, args.link_latency_us, args.overlap,
                           args.microbatches, args.device_memory_gb)


def workload_from_args(args: argparse.Namespace):
    from ..workloads import get_workload

    workload = get_workload(args.workload, args.model, args.dataset)
    if args.model:
        workload.build_model()  # a broken factory fails here, in one line, before anything runs
    if args.dataset:
        workload.build_datasets(args.seed)
    return workload


def parse_strategies(text: str, extra: tuple = ()) -> list[str]:
    """Registered strategy names (and, for `plan`, those with a cost model)."""
    from ..strategies import strategy_names

    names = [name.strip() for name in text.split(",") if name.strip()]
    known = list(dict.fromkeys([*strategy_names(), *extra]))
    for name in names:
        if name not in known:
            raise UsageError(f"unknown strategy {name!r}; choose from: {', '.join(known)} (--strategy)")
    if not names:
        raise UsageError(f"--strategy is empty; choose from: {', '.join(known)}")
    return names


def run(args: argparse.Namespace) -> int:
    from ..devices import choose_device
    from ..plan.make import make_probe, plan
    from ..plan.predict import COST_MODELS
    from ..plan.report import print_plan
    from ..plan.verdict import verdicts

    device = None if args.device == "auto" else args.device
    device_type = choose_device(device, 0).type
    world_sizes = parse_int_list(args.world_sizes, "--world-sizes")
    strategies = [s for s in parse_strategies(args.strategy, tuple(COST_MODELS)) if s in COST_MODELS]
    if not strategies:
        raise UsageError(f"--strategy {args.strategy}: no cost model for these; plan knows: {', '.join(COST_MODELS)}")
    options = options_from_args(args, device_type)
    if args.comm is not None and not args.comm.is_file():
        raise UsageError(f"--comm {args.comm}: no such file; make it with `scaletrain comm --ops all_reduce --json`")
    workload = workload_from_args(args)
    spec = {"workload": args.workload, "model": args.model, "dataset": args.dataset}
    probe = make_probe(workload, spec, args.batch_size, world_sizes, options, device=device,
                       backend=None if args.backend == "auto" else args.backend, comm_json=args.comm,
                       steps=args.steps, warmup=args.warmup, seed=args.seed, rounds=args.probe_rounds)
    predictions = plan(probe, strategies, world_sizes, options)
    conclusions = verdicts(predictions, options.device_memory_bytes)
    if args.json:
        print(json.dumps({"probe": probe.as_dict(), "options": options.__dict__,
                          "predictions": [p.as_dict() for p in predictions], "conclusions": conclusions},
                         indent=2, sort_keys=True, default=str))
    else:
        print_plan(probe, options, predictions, conclusions)
    return 0
