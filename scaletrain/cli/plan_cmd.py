"""`scaletrain plan`: measure, in a few rounds, a process's step at the thread counts it will
have and the all-reduce, then predict step time, speedup, efficiency and memory per device for
each strategy and world size, including sizes this machine does not have, each with its 95%
interval over the rounds.

Not launched: runs its probe jobs itself (spawn). Started by a launcher (torchrun, mpirun,
srun): is one rank of one probe job and writes that job's measurements to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..defaults import (BENCH_MAX_OTHER_CORES, BENCH_MEASURE_S, PLAN_BUDGET_S, PLAN_MAX_ERROR,
                        PLAN_PROBE_ROUNDS)
from ..errors import UsageError, arg, as_flags
from ..launchers.interrupts import Stopped, signal_name
from ..parallel.dims import MESH, MESH_DIMS
from ..workloads import BUILTIN
from .parsing import positive_float, positive_int
from .perf_options import add_steady_memory_argument, apply_steady_memory

NAME = "plan"
DEFAULT_WORLD_SIZES = "1,2,8,16,64"
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


def hosts_for(args: argparse.Namespace, default_world_sizes: str):
    """The machines --hosts/--hostfile name (measure.jobs.Hosts), or None: everything on this
    one. Across hosts the processes per machine are the hosts' slots, and the world sizes are one
    process and every slot (the default when --world-sizes is not given)."""
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
    hosts.check_world_sizes(parse_int_list(args.world_sizes, "--world-sizes"))
    return hosts


def add_layout_arguments(p: argparse.ArgumentParser) -> None:
    """What shapes the configurations predicted, as the strategies' own flags name it (bench
    takes every strategy flag instead: it runs them)."""
    p.add_argument("--microbatches", type=positive_int,
                   help="pipeline micro-batches per step (default: the strategy's, one per stage)")
    p.add_argument("--devices-per-process", type=positive_int,
                   help="devices a dp, mp or hybrid (DDP + model parallel) process drives (default: the GPUs visible; a CPU has one, "
                        "which mp cuts into 2 parts)")
    for dim in MESH:
        p.add_argument(f"--{dim.name.replace('_', '-')}", type=positive_int, metavar=dim.metavar,
                       help=f"{dim.name} of the configurations predicted, for the strategies that take it (default: "
                            f"the strategy's own): {dim.help}")


def layout_options(args: argparse.Namespace) -> dict:
    """The strategy options the flags of add_layout_arguments give (None: not given)."""
    return {name: getattr(args, name, None) for name in ("microbatches", *MESH_DIMS)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..plan.cost_models import COST_MODELS

    add_model_arguments(p, "synthetic-cnn")
    p.add_argument("--strategy", default=",".join(COST_MODELS),
                   help=f"comma-separated strategies to predict (default: {','.join(COST_MODELS)})")
    p.add_argument("--world-sizes", default=DEFAULT_WORLD_SIZES,
                   help=f"process counts to predict (default {DEFAULT_WORLD_SIZES})")
    add_prediction_arguments(p)
    add_layout_arguments(p)
    p.add_argument("--steps", type=positive_int, default=20,
                   help="measured steps per thread count at least (default 20)")
    p.add_argument("--warmup", type=positive_int, default=3, help="steps left out first (default 3)")
    add_min_seconds_argument(p)
    add_steady_memory_argument(p)
    p.add_argument("--probe-rounds", type=positive_int, default=PLAN_PROBE_ROUNDS,
                   help="rounds of the plan's measurements at least, in alternating order; the spread of the "
                        f"predictions over them is the expected error (default {PLAN_PROBE_ROUNDS})")
    add_noise_arguments(p)
    p.add_argument("--threads", type=positive_int,
                   help="(launched) CPU threads per process of this probe job (default: cores ÷ processes)")
    p.add_argument("--tp-step-only", action="store_true", help=argparse.SUPPRESS)  # (launched) probe.ProbeJobs.tp_copies
    p.add_argument("--steps-only", action="store_true", help=argparse.SUPPRESS)  # (launched) ProbeJobs._hosts_ddp_step
    p.add_argument("--choose", action="store_true",
                   help="choose the fastest configuration that fits the memory for the world size given (one "
                        "--world-sizes value; default: this machine's processes): every strategy and composition × "
                        "degrees × micro-batches × activation checkpointing, from measurements cached per model, "
                        "batch, world and machine")
    p.add_argument("--json", action="store_true", help="print the measurements and predictions as JSON")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="also write the JSON to FILE (launched: this probe job's measurements)")
    from .plan_cluster import add_cluster_arguments

    add_cluster_arguments(p)  # --hardware: a GPU cluster, predicted from a hardware profile


def machine_from_args(args: argparse.Namespace, device_type: str):
    from ..plan.machine import default_machine

    if args.overlap is not None and not 0 <= args.overlap <= 1:
        raise UsageError(f"--overlap {args.overlap}: must be between 0 and 1")
    return default_machine(device_type, args.nproc_per_node, args.link_gbps, args.link_latency_us, args.overlap,
                           args.device_memory_gb, getattr(args, "devices_per_process", None))


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


def probe_spec(args: argparse.Namespace, workload: str) -> dict:
    """What every probe job measures, as names (the jobs rebuild the workload themselves)."""
    return {"workload": workload, "model": args.model, "dataset": args.dataset, "batch_size": args.batch_size,
            "seed": args.seed, "device": None if args.device == "auto" else args.device,
            "backend": None if args.backend == "auto" else args.backend, "steps": args.steps,
            "warmup": args.warmup, "min_seconds": args.min_seconds, "microbatches": getattr(args, "microbatches", None)}


def be_a_probe_rank(args: argparse.Namespace) -> int:
    from ..environment import detect
    from ..files import write_json_atomic
    from ..plan.probe_rank import measure_probe_round, measure_tp_round

    if args.out is None:
        raise UsageError("a launched plan measures one probe job and writes it to --out FILE; give --out")
    from ..measure.failed import out_of_memory

    spec = {**probe_spec(args, args.workload), "threads": args.threads, "steps_only": args.steps_only}
    try:
        result = measure_tp_round(spec) if args.tp_step_only else measure_probe_round(spec)
    except (RuntimeError, MemoryError) as exc:
        if not out_of_memory(exc):
            raise
        raise UsageError(f"measuring {args.workload} at {arg('batch_size', args.batch_size)} ran out of memory in one "
                         f"process ({str(exc).splitlines()[0].strip()}): the measurement needs a step of one process "
                         f"with the whole batch; give a smaller {arg('batch_size')}") from None
    if detect(os.environ).rank == 0:
        write_json_atomic(args.out, result)
    return 0


def run(args: argparse.Namespace) -> int:
    from ..environment import detect

    if getattr(args, "hardware", None):
        from .plan_cluster import run_cluster

        return run_cluster(args)
    apply_steady_memory(args)
    if detect(os.environ).launched:
        return be_a_probe_rank(args)
    return plan_here(args)


def memory_note(args: argparse.Namespace, device_type: str) -> list[str]:
    """What a CPU budget's figures mean without --steady-memory."""
    if device_type == "cuda" or not getattr(args, "device_memory_gb", None) or getattr(args, "steady_memory", False):
        return []
    return ["Memory is predicted as a process holds it; without --steady-memory glibc's heap keeps freed tensors, and "
            "a CPU process's resident peak runs 10-20% above that: give --steady-memory here and to train when the "
            "budget is tight."]


def check_predictable(strategies: list[str], world_sizes: list[int], shapes: dict, workload,
                      batch_size: int) -> list[str]:
    """Before measuring: something of what was asked can be predicted (else the one line
    `bench` gives for the same degrees); the lines naming what was left out and why, where
    degrees were given (the defaults' gaps, such as tp for a model without a plan, go unsaid)."""
    from ..plan.constraints import predictable
    from ..workloads.meta import meta_model

    kept, notes = predictable(strategies, world_sizes, shapes, meta_model(workload), batch_size)
    if not kept:
        raise UsageError(f"nothing to predict: {'; '.join(notes[:3])}{' …' if len(notes) > 3 else ''}; give "
                         "degrees that divide --world-sizes and split the model (or leave them out)")
    given = any(v is not None for v in shapes.values())
    return [f"Left out: {as_flags(note)}." for note in notes] if given else []


def plan_here(args: argparse.Namespace) -> int:
    from ..devices import choose_device
    from ..plan.cost_models import COST_MODELS
    from ..plan.make import probe_plan
    from ..plan.predict import predict_all
    from ..plan.probe import load_comm_json
    from ..plan.report import print_plan
    from ..plan.summary import expected_error, key, median_predictions, median_probe, step_spreads
    from ..plan.verdict import error_line, fit_advice, implausible, verdicts

    device = None if args.device == "auto" else args.device
    device_type = choose_device(device, 0).type
    if args.choose:
        return choose_here(args, device_type)
    hosts = hosts_for(args, DEFAULT_WORLD_SIZES)
    world_sizes = parse_int_list(args.world_sizes, "--world-sizes")
    strategies = [s for s in parse_strategies(args.strategy, tuple(COST_MODELS)) if s in COST_MODELS]
    if not strategies:
        raise UsageError(f"--strategy {args.strategy}: no cost model for these; plan knows: {', '.join(COST_MODELS)}")
    machine = machine_from_args(args, device_type)
    if args.comm is not None and not args.comm.is_file():
        raise UsageError(f"--comm {args.comm}: no such file; make it with `scaletrain comm --ops all_reduce --json`")
    link = load_comm_json(args.comm) if args.comm is not None else None
    check_out_file(args.out)
    workload = workload_from_args(args)
    shapes = layout_options(args)
    left_out = check_predictable(strategies, world_sizes, shapes, workload, args.batch_size)
    probes_plan = probe_plan(workload.name, probe_spec(args, args.workload), world_sizes, machine, device_type, link,
                             hosts)

    def predictions_of(probes: list):
        return median_predictions([predict_all(p, strategies, world_sizes, machine, shapes) for p in probes])

    measured = measure_rounds(probes_plan, args, lambda probes: expected_error(predictions_of(probes)[1]),
                              say=(lambda text: print(text, file=sys.stderr, flush=True)) if args.json else
                              (lambda text: print(text, flush=True)))
    probes, stopped = measured.probes, measured.stopped
    all_disturbed = not probes
    if all_disturbed:  # what the disturbed rounds measured, said to be no answer
        probes = measured.disturbed
    predictions, spreads = predictions_of(probes)
    error = expected_error(spreads)
    told = error is not None and error <= args.max_error and not all_disturbed
    probe = median_probe(probes)
    conclusions = ([f"Every round was disturbed: other processes kept more than --max-other-load "
                    f"{args.max_other_load:g} cores busy during all {len(measured.left_out)} of them."]
                   if all_disturbed else []) + \
        verdicts(predictions, machine.device_memory_bytes, probe=probe,
                 noise=None if told else (error, len(probes), args.max_error)) + \
        fit_advice(probe, predictions, machine, shapes) + memory_note(args, device_type) + left_out + \
        [error_line(error, len(probes))]
    document = {"probe": probe.as_dict(), "probes": [p.as_dict() for p in probes], "machine": machine.__dict__,
                "predictions": [{**p.as_dict(), "speedup_interval": spread_pair(spreads.get(key(p))),
                                 "measurement_error": implausible(p, probe)} for p in predictions],
                "expected_error": error, "max_error": args.max_error, "told": told,
                "rounds_left_out": measured.left_out, "stop_reason": measured.stop_reason,
                "max_other_load_cores": args.max_other_load, "conclusions": conclusions}
    if args.out is not None:
        from ..files import write_json_atomic

        write_json_atomic(args.out, document)
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True, default=str))
    else:
        print_plan(probe, machine, predictions, spreads, step_spreads(probes), len(probes), conclusions)
    if stopped is not None:
        print(f"scaletrain: plan stopped by {signal_name(stopped.signum)} after {len(probes)} probe round(s); the "
              "predictions above come from those", file=sys.stderr)
        return stopped.status
    return 0


def measure_rounds(probes_plan, args: argparse.Namespace, error_of, say, what: str = "plan"):
    """The plan's rounds (plan/rounds.py): disturbed ones left out and run again, more while the
    expected error exceeds --max-error and the --budget allows, those finished kept when a
    signal (Ctrl-C, SIGTERM, SIGHUP) ends them early."""
    from ..plan.rounds import measure

    return measure(probes_plan, args.probe_rounds, args.budget, args.max_other_load, error_of, args.max_error, say,
                   what)


def spread_pair(spread) -> list | None:
    return [spread.low, spread.high] if spread is not None and spread.known else None


def check_out_file(path: Path | None) -> None:
    if path is None:
        return
    parent = path.expanduser().absolute().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"--out {path}: folder {parent} does not exist or cannot be written; choose another --out")


def measured_probes(args: argparse.Namespace, workload_name: str, world_size: int, machine, device_type: str,
                    say=print, hosts=None, what: str = "plan") -> list:
    """The probes a choice predicts from: cached for this model, batch, world and machine, or
    measured now (and cached): rounds as a plan's, those other processes disturbed left out.
    `what` the measurement is, in what it says when stopped."""
    from ..plan.choose import cache_key, cached_probes, store_probes
    from ..plan.make import probe_plan
    from ..plan.predict import predict_all
    from ..plan.summary import expected_error, median_predictions

    spec = probe_spec(args, args.workload)
    key = cache_key(spec, world_size, machine.nproc_per_node, device_type, machine.cores,
                    hosts.names if hosts else "")
    probes = cached_probes(key, say)
    if probes:
        say(f"scaletrain: using the measurements made earlier for this model, batch and machine (cache {key})")
        return probes
    say(f"scaletrain: measuring {workload_name} for a choice ({args.probe_rounds} round(s))")
    jobs = probe_plan(workload_name, spec, sorted({1, world_size}), machine, device_type, None, hosts)

    def error_of(probes: list):
        plain = [predict_all(p, ["ddp", "fsdp"], sorted({1, world_size}), machine) for p in probes]
        return expected_error(median_predictions(plain)[1])

    measured = measure_rounds(jobs, args, error_of, say=lambda text: say(text) if text.startswith("  round") and
                              "left out" in text else None, what=what)
    if measured.stopped is not None:
        raise Stopped(measured.stopped.signum)
    if not measured.probes:
        raise UsageError(f"no round of the measurement could be kept: other processes kept more than "
                         f"{arg('max_other_load', args.max_other_load)} cores busy during all of them; choose when the "
                         "machine is quieter")
    if measured.left_out:
        say(f"scaletrain: {len(measured.left_out)} round(s) left out and measured again: other processes kept the "
            "machine busy")
    store_probes(key, measured.probes)
    return measured.probes


def choice_constraints(args: argparse.Namespace, world: int, workload):
    """--strategy (when given) and the layout flags: what --choose must keep."""
    from ..plan.constraints import Constraints, check_possible
    from ..plan.cost_models import COST_MODELS
    from ..workloads.meta import meta_model

    named = () if args.strategy == ",".join(COST_MODELS) else tuple(parse_strategies(args.strategy))
    constraints = Constraints.given(layout_options(args), named)
    check_possible(constraints, world, meta_model(workload), args.batch_size)
    return constraints


def choose_here(args: argparse.Namespace, device_type: str) -> int:
    from ..plan.choose import choose

    hosts = hosts_for(args, DEFAULT_WORLD_SIZES)
    sizes = parse_int_list(args.world_sizes, "--world-sizes") if args.world_sizes != DEFAULT_WORLD_SIZES else []
    if hosts:
        sizes = [max(sizes)]
    machine = machine_from_args(args, device_type)
    if len(sizes) > 1:
        raise UsageError(f"--choose picks a configuration for one world size; give one --world-sizes value "
                         f"(e.g. --world-sizes {sizes[-1]})")
    world = sizes[0] if sizes else machine.nproc_per_node
    check_out_file(args.out)
    workload = workload_from_args(args)
    constraints = choice_constraints(args, world, workload)  # an unknown or impossible one: refused now
    probes = measured_probes(args, workload.name, world, machine, device_type,
                             say=(lambda text: None) if args.json else print, hosts=hosts)
    choice = choose(probes, world, args.batch_size, machine, constraints)
    document = {"world_size": world, "chosen": choice.chosen.as_dict() if choice.chosen else None,
                "flags": choice.flags(), "runner_up": choice.runner_up.as_dict() if choice.runner_up else None,
                "rejected_for_memory": choice.rejected_for_memory, "considered": choice.considered,
                "speedup_interval": choice.speedup_interval, "tight": choice.tight,
                "fit_odds": choice.odds if choice.tight else None, "lines": choice.lines(),
                "candidates": [p.as_dict() for p in choice.candidates]}
    if args.out is not None:
        from ..files import write_json_atomic

        write_json_atomic(args.out, document)
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True, default=str))
    else:
        for line in [*choice.lines(), *memory_note(args, device_type)]:
            print(line)
        if choice.chosen:
            steady = " --steady-memory" if args.steady_memory else ""
            print(f"Train with it: scaletrain train --nproc-per-node {world}{steady} {' '.join(choice.flags())}")
    return 0 if choice.chosen else 1
