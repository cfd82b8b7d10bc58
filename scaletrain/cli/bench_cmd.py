"""`scaletrain bench`: measure samples/s, speedup, efficiency, where each step's time goes and
(with --accuracy) held-out accuracy, for strategies and world sizes, against one process
measured the same way; rounds go on until the speedup's 95% interval decides whether
distributing is worth it, or the budget is spent; the plan's prediction is checked against
each measurement.

Not launched: checks everything, then measures each configuration in its own fresh job.
Started by a launcher (torchrun, mpirun, srun): measures this job's one configuration and
writes its result.json.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ..foundation.defaults import BENCH_BUDGET_S, WORTH_AT_SPEEDUP
from ..foundation.errors import UsageError
from ..foundation.text_values import AUTO
from ..strategies.flags import add_strategy_arguments, strategy_options_from_args
from .measure_options import (add_max_other_load_argument, add_min_seconds_argument, add_model_arguments, batch_size_of,
                              add_prediction_arguments, check_comm_file, hosts_for, parse_int_list,
                              parse_strategies)
from .parsing import positive_float, positive_int
from .perf_options import add_process_memory_arguments, apply_process_memory

NAME = "bench"
HELP = "measure speedup, efficiency, time breakdown and accuracy of strategies against one process"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", default="ddp", help="comma-separated strategies to measure (default ddp)")
    p.add_argument("--world-sizes", default="1,2", help="comma-separated world sizes: processes in all (default 1,2)")
    p.add_argument("--nproc", dest="world_sizes", help=argparse.SUPPRESS)  # the older name of --world-sizes
    add_model_arguments(p, None, "default synthetic-cnn; digits-cnn with --accuracy")
    p.add_argument("--steps", type=positive_int, default=30,
                   help="measured steps per configuration at least, after warm-up (default 30)")
    p.add_argument("--warmup", type=positive_int, default=5, help="steps left out first (default 5)")
    add_min_seconds_argument(p)
    add_process_memory_arguments(p)
    p.add_argument("--budget", type=positive_float, default=BENCH_BUDGET_S, metavar="SECONDS",
                   help="rounds (every configuration, in alternating order) go on until the verdict is decided "
                        f"or the next would end past this many seconds (default {BENCH_BUDGET_S:g})")
    p.add_argument("--rounds", type=positive_int,
                   help="exactly this many rounds, whatever the verdict and the budget")
    add_max_other_load_argument(p)
    p.add_argument("--worth-at", type=positive_float, default=WORTH_AT_SPEEDUP, metavar="SPEEDUP",
                   help="speedup over one process from which distributing is worth it "
                        f"(default {WORTH_AT_SPEEDUP:g})")
    p.add_argument("--threads", type=positive_int,
                   help="CPU threads per process of the distributed runs (default: cores ÷ processes)")
    p.add_argument("--accuracy", action="store_true",
                   help="train whole epochs and report held-out accuracy per world size")
    p.add_argument("--epochs", type=positive_int, help="epochs of an accuracy run (default: the workload's)")
    p.add_argument("--lr", type=float, help="one-process learning rate (default: the workload's)")
    p.add_argument("--lr-scaling", default=None,
                   help="comma-separated rules for the learning rate on n processes: none, linear (× n), "
                        "sqrt (× √n) (default: none; none,linear with --accuracy)")
    p.add_argument("--lr-warmup-steps", type=int, help="steps of linear learning-rate warm-up (default: one epoch)")
    p.add_argument("--no-predict", action="store_true", help="measure only; skip the plan's predictions")
    add_prediction_arguments(p)
    add_strategy_arguments(p)  # each configuration runs with those of them its strategy takes
    p.add_argument("--out", type=Path, help="output folder (default: a new folder under runs/)")


def settings_from_args(args: argparse.Namespace):
    from ..bench.spec import BenchSettings

    workload = args.workload or ("digits-cnn" if args.accuracy else "synthetic-cnn")
    if args.lr is not None and not args.lr > 0:
        raise UsageError(f"--lr {args.lr}: must be greater than 0")
    if args.lr_warmup_steps is not None and args.lr_warmup_steps < 0:
        raise UsageError(f"--lr-warmup-steps {args.lr_warmup_steps}: must be 0 or more")
    return BenchSettings(workload=workload, model=args.model, dataset=args.dataset, seq_len=args.seq_len,
                         batch_size=batch_size_of(args, workload),
                         steps=args.steps, warmup=args.warmup, min_seconds=args.min_seconds,
                         accuracy=args.accuracy, epochs=args.epochs,
                         lr=args.lr, lr_warmup_steps=args.lr_warmup_steps, seed=args.seed,
                         backend=None if args.backend == AUTO else args.backend,
                         device=None if args.device == AUTO else args.device,
                         strategy_options=strategy_options_from_args(args))


def parse_rules(text: str | None, accuracy: bool) -> list[str]:
    from ..bench.lr import RULES, lr_factor

    rules = [r.strip() for r in (text or ("none,linear" if accuracy else "none")).split(",") if r.strip()]
    for rule in rules:
        lr_factor(rule, 1)  # raises a UsageError naming the choices
    if not rules:
        raise UsageError(f"--lr-scaling is empty; choose from: {', '.join(RULES)}")
    return list(dict.fromkeys(rules))


def be_a_rank(args: argparse.Namespace, settings) -> int:
    from ..bench.orchestrate import RESULT_FILE
    from ..bench.worker import measure
    from ..process.environment import detect
    from ..foundation.safe_files import write_json_atomic
    from .outdir import default_out

    names = parse_strategies(args.strategy)
    rules = parse_rules(args.lr_scaling, False)
    if len(names) != 1 or len(rules) != 1:
        raise UsageError("a launched bench measures one configuration: give one --strategy and one --lr-scaling")
    env = detect(os.environ)
    result = measure(settings, names[0], args.threads, rules[0])
    result["options"] = settings.strategy_options
    if env.rank == 0:
        out = args.out or default_out(f"bench-{names[0]}", env.world_size)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / RESULT_FILE, result)
    return 0


def run(args: argparse.Namespace) -> int:
    from ..process.environment import detect

    apply_process_memory(args)
    settings = settings_from_args(args)
    if detect(os.environ).launched:
        return be_a_rank(args, settings)
    return orchestrate(args, settings)


def orchestrate(args: argparse.Namespace, settings) -> int:
    from ..process.backends import choose_backend
    from ..bench.configs import bench_configs
    from ..measure.jobs import check_answering
    from ..process.devices import choose_device, cpu_cores
    from ..plan import default_machine
    from ..workloads import get_workload
    from .outdir import check_out, create_out, default_out

    strategies = parse_strategies(args.strategy)
    hosts = hosts_for(args, "1,2")
    world_sizes = parse_int_list(args.world_sizes, "--world-sizes")
    check_options_apply(strategies, settings.strategy_options)
    rules = parse_rules(args.lr_scaling, args.accuracy)
    device = choose_device(settings.device, 0)
    choose_backend(settings.backend, device.type)
    workload = get_workload(settings.workload, args.model, args.dataset, settings.seq_len)
    if args.model:
        workload.build_model()  # a broken factory fails here, in one line, before anything runs
    check_answering(hosts)  # the other hosts answer and run scaletrain (a few seconds)
    if args.dataset:
        workload.build_datasets(args.seed)
    configs, notes = bench_configs(strategies, world_sizes, rules, cpu_cores() if device.type == "cpu" else None,
                                   settings.accuracy, settings.strategy_options)
    if len(configs) < 2:
        raise UsageError(f"nothing to compare with the baseline: {'; '.join(notes) or 'no configuration'}; "
                         "use --strategy ddp --world-sizes 1,2")
    # bench runs every configuration on this one machine (on a CPU: its processes share it)
    nproc = args.nproc_per_node or (max(world_sizes) if device.type == "cpu" else None)
    machine = default_machine(settings.device, nproc, args.link_gbps, args.link_latency_us, args.overlap,
                              args.device_memory_gb, getattr(args, "devices_per_process", None))
    check_comm_file(args.comm)
    out = create_out(check_out(args.out or default_out("bench", max(world_sizes))))
    return measure_and_report(args, settings, workload, configs, notes, world_sizes, machine, out, hosts)


def check_options_apply(strategies: list[str], options: dict) -> None:
    """Every strategy option given applies to at least one strategy measured, and to each in a
    way it accepts (checked as the strategy itself checks it)."""
    from ..foundation.options import aliases_of
    from ..plan.configuration import options_for
    from ..strategies import REGISTRY, get_strategy

    def named(cls, key: str) -> str:  # the option a key gives, by whichever of its names
        return aliases_of(cls.Options).get(key, key)

    used = set()
    for name in strategies:
        given = options_for(name, options)
        get_strategy(name, **given)  # a value the strategy refuses: its own one line
        used |= {k for k in options if named(REGISTRY[name], k) in given}
    unused = [k for k in options if k not in used]
    if unused:
        takers = {k: [n for n, cls in REGISTRY.items() if named(cls, k) in cls.Options.__dataclass_fields__]
                  for k in unused}
        listed = "; ".join(f"--{k.replace('_', '-')} applies to {', '.join(v) or 'no strategy'}" for k, v in takers.items())
        raise UsageError(f"{listed}, and none of --strategy {','.join(strategies)} takes it; add one that does or drop it")


def measure_and_report(args, settings, workload, configs, notes, world_sizes, machine, out: Path, hosts=None) -> int:
    from ..bench.session import Session, measure, report
    from ..measure.rounds import Limits
    from ..plan import Candidates, Measuring, PlanRequest
    from ..strategies import REGISTRY
    from ..version import __version__
    from .measure_options import training_of

    import torch

    started = time.perf_counter()
    say = lambda text: print(text, flush=True)  # noqa: E731
    limits = Limits(budget_s=args.budget, fixed_rounds=args.rounds, max_other_cores=args.max_other_load)
    rounds = f"{args.rounds} round(s)" if args.rounds else f"rounds until decided or {args.budget:g} s (2 at least)"
    say(f"scaletrain bench: {workload.name}, batch {settings.batch_size} per process, "
        f"{'accuracy over whole epochs' if settings.accuracy else f'{settings.steps} measured steps'}, "
        f"{len(configs)} configurations, {rounds}; writing {out}")
    if hosts is not None:
        say(f"  across {hosts.names}: {hosts.slots} process(es) on each (mpirun); one process runs here")
    for note in notes:
        say(f"  note: {note}")
    plan = None
    if not args.no_predict:  # each round also measures what the plan's predictions of the configurations rest on
        listed = tuple((s.strategy, s.world_size, s.options) for s in configs if REGISTRY[s.strategy].plannable)
        plan = PlanRequest(training_of(args, settings.workload), machine,
                           Candidates(world_sizes=tuple(world_sizes), listed=listed),
                           Measuring(settings.device, settings.backend, settings.steps, settings.warmup,
                                     settings.min_seconds, comm=args.comm, hosts=hosts,
                                     microbatches=getattr(args, "microbatches", None)))
    session = Session(settings, configs, notes, limits, args.worth_at, plan, out, hosts)
    rounds = measure(session, say)
    first = next((r for runs in rounds.results.values() for r in runs if "backend" in r), {})
    title = (f"{workload.name}, batch {settings.batch_size}/process, {first.get('backend')} on {first.get('device')} "
             f"({machine.cores} cores), torch {torch.__version__}")
    facts = {"scaletrain_version": __version__, "torch_version": torch.__version__, "cores": machine.cores}
    return report(session, rounds, title, started, facts, say)
