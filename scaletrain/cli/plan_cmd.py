"""`scaletrain plan`: measure, in a few rounds, a process's step at the thread counts it will
have and the all-reduce, then predict step time, speedup, efficiency and memory per device for
each strategy and world size, including sizes this machine does not have, each with its 95%
interval over the rounds; or (--choose) choose the fastest configuration that fits.

This module reads the flags into a `PlanRequest`, hands it to `scaletrain.plan.make_plan` and
prints the `Plan`; with --hardware (a GPU cluster from a hardware profile) cli/plan_cluster.py
reads the flags into a `ClusterRequest` and prints its plan.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..foundation.defaults import PLAN_PROBE_ROUNDS
from ..foundation.errors import UsageError
from ..foundation.text_values import AUTO
from ..launchers.interrupts import signal_name
from ..parallel.dims import MESH, MESH_DIMS
from .measure_options import (add_min_seconds_argument, add_model_arguments, add_noise_arguments,
                              add_prediction_arguments, check_comm_file, hosts_for, parse_int_list,
                              parse_strategies, training_of)
from .parsing import positive_int
from .perf_options import add_process_memory_arguments, apply_process_memory, process_memory_flags

NAME = "plan"
DEFAULT_WORLD_SIZES = "1,2,8,16,64"
HELP = "predict speedup, efficiency and memory per device for each strategy and world size, before running"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..strategies import REGISTRY

    plannable = ",".join(name for name, cls in REGISTRY.items() if cls.plannable)
    add_model_arguments(p, "synthetic-cnn")
    p.add_argument("--strategy", default=plannable, help=f"comma-separated strategies to predict (default: {plannable}; "
                   "with --choose: the strategies it may choose among)")
    p.set_defaults(default_strategy=plannable)  # told apart from a --strategy given (what --choose keeps)
    p.add_argument("--world-sizes", default=DEFAULT_WORLD_SIZES,
                   help=f"process counts to predict (default {DEFAULT_WORLD_SIZES})")
    add_prediction_arguments(p)
    p.add_argument("--microbatches", type=positive_int,
                   help="pipeline micro-batches per step (default: the strategy's, one per stage)")
    p.add_argument("--devices-per-process", type=positive_int,
                   help="devices a dp, mp or hybrid (DDP + model parallel) process drives (default: the GPUs visible; "
                        "a CPU has one, which mp cuts into 2 parts)")
    for dim in MESH:
        p.add_argument(f"--{dim.name.replace('_', '-')}", type=positive_int, metavar=dim.metavar,
                       help=f"{dim.name} of the configurations predicted, for the strategies that take it (default: "
                            f"the strategy's own): {dim.help}")
    p.add_argument("--steps", type=positive_int, default=20, help="measured steps per thread count at least (default 20)")
    p.add_argument("--warmup", type=positive_int, default=3, help="steps left out first (default 3)")
    add_min_seconds_argument(p)
    add_process_memory_arguments(p)
    p.add_argument("--probe-rounds", type=positive_int, default=PLAN_PROBE_ROUNDS,
                   help="rounds of the plan's measurements at least, in alternating order; the spread of the "
                        f"predictions over them is the expected error (default {PLAN_PROBE_ROUNDS})")
    add_noise_arguments(p)
    p.add_argument("--choose", action="store_true",
                   help="choose the fastest configuration that fits the memory for the world size given (one "
                        "--world-sizes value; default: this machine's processes): every strategy and composition × "
                        "degrees × micro-batches × activation checkpointing, from measurements cached per model, "
                        "batch, world and machine")
    p.add_argument("--json", action="store_true", help="print the measurements and predictions as JSON")
    p.add_argument("--out", type=Path, metavar="FILE", help="also write the JSON to FILE")
    from .plan_cluster import add_cluster_arguments

    add_cluster_arguments(p)  # --hardware: a GPU cluster, predicted from a hardware profile


def request_of(args: argparse.Namespace):
    """The request the flags describe."""
    from ..plan import Candidates, Measuring, PlanRequest, default_machine

    device = None if args.device == AUTO else args.device
    shapes = {name: getattr(args, name) for name in ("microbatches", *MESH_DIMS)}
    training = training_of(args)
    hosts = hosts_for(args, DEFAULT_WORLD_SIZES)
    given = args.world_sizes != DEFAULT_WORLD_SIZES
    sizes = parse_int_list(args.world_sizes, "--world-sizes")
    machine = default_machine(device, args.nproc_per_node, args.link_gbps, args.link_latency_us, args.overlap,
                              args.device_memory_gb, args.devices_per_process)
    if args.choose:  # one world size: across hosts every slot, else the one given, else this machine's processes
        if given and not hosts and len(sizes) > 1:
            raise UsageError(f"--choose picks a configuration for one world size; give one --world-sizes value "
                             f"(e.g. --world-sizes {sizes[-1]})")
        # What is given beside --choose, the choice keeps: the strategies named, the degrees.
        named = () if args.strategy == args.default_strategy else tuple(parse_strategies(args.strategy))
        candidates = Candidates(named, options=shapes,
                                choose=max(sizes) if hosts else sizes[0] if given else machine.nproc_per_node)
    else:
        candidates = Candidates(tuple(parse_strategies(args.strategy)), tuple(sizes), shapes)
    check_comm_file(args.comm)
    measuring = Measuring(device, None if args.backend == AUTO else args.backend, args.steps, args.warmup,
                          args.min_seconds, args.probe_rounds, args.budget, args.max_error, args.max_other_load,
                          args.comm, hosts, args.microbatches, args.steady_memory, cached=args.choose)
    return PlanRequest(training, machine, candidates, measuring, memory_budget_given=bool(args.device_memory_gb))


def run(args: argparse.Namespace) -> int:
    from ..measure.jobs import check_answering
    from ..plan import make_plan
    from ..plan.report import show_choice, show_plan, train_command

    if args.hardware:  # a GPU cluster from a hardware profile, nothing measured
        from .plan_cluster import cluster_request, show_cluster

        cluster = cluster_request(args)
        return show_cluster(make_plan(cluster), args.choose, args.json, args.out)
    apply_process_memory(args)  # the probe jobs run with the allocator (and --steady-memory) asked for
    request = request_of(args)
    check_out_file(args.out)
    check_answering(request.measuring.hosts)  # before anything is measured: the other hosts answer
    quiet = args.json and request.candidates.choose is not None
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr if args.json else sys.stdout,
                                                                 flush=True))
    plan = make_plan(request, say)
    document = plan.as_dict()
    command = train_command(plan, request.training, [*process_memory_flags(args), *_where_flags(args)])
    if command:
        document["train_command"] = command
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True, default=str))
    elif plan.choice is not None:
        show_choice(plan, command)
    else:
        show_plan(plan)
    if args.out is not None:
        from ..foundation.safe_files import write_json_atomic

        write_json_atomic(args.out, document)
    if plan.measured.stopped is not None:
        print(f"scaletrain: plan stopped by {signal_name(plan.measured.stopped.signum)} after {len(plan.probes)} probe "
              "round(s); the predictions above come from those", file=sys.stderr)
        return plan.measured.stopped.status
    return 0 if plan.choice is None or plan.choice.chosen else 1


def _where_flags(args: argparse.Namespace) -> list[str]:
    """Where the plan measured, as `scaletrain train` flags (the machines, the device, the backend)."""
    given = [("--hosts", args.hosts), ("--hostfile", args.hostfile),
             ("--device", None if args.device == AUTO else args.device),
             ("--backend", None if args.backend == AUTO else args.backend)]
    return [word for flag, value in given if value for word in (flag, str(value))]


def run_rank(args: argparse.Namespace) -> int:
    raise UsageError("scaletrain plan starts its own probe jobs; run it from a shell, not under a launcher")


def check_out_file(path: Path | None) -> None:
    if path is None:
        return
    parent = path.expanduser().absolute().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"--out {path}: folder {parent} does not exist or cannot be written; choose another --out")
