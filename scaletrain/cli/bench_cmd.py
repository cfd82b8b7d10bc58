"""`scaletrain bench`: measure samples/s, speedup, efficiency, where each step's time goes and
(with --accuracy) held-out accuracy, for strategies and world sizes, against one process
using every core; the plan's prediction is printed beside each measurement.

Not launched: checks everything, then measures each configuration in its own fresh job.
Started by a launcher (torchrun, mpirun, srun): measures this job's one configuration and
writes its result.json.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ..errors import UsageError
from .parsing import positive_int
from .plan_cmd import add_model_arguments, add_prediction_arguments, parse_int_list, parse_strategies

NAME = "bench"
HELP = "measure speedup, efficiency, time breakdown and accuracy of strategies against one process"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", default="ddp", help="comma-separated strategies to measure (default ddp)")
    p.add_argument("--nproc", default="1,2", help="comma-separated world sizes (default 1,2)")
    add_model_arguments(p, None, "default synthetic-cnn; digits-cnn with --accuracy")
    p.add_argument("--steps", type=positive_int, default=30,
                   help="measured steps per configuration, after warm-up (default 30)")
    p.add_argument("--warmup", type=positive_int, default=5, help="steps left out first (default 5)")
    p.add_argument("--repeat", type=positive_int, default=1,
                   help="rounds over all configurations, in alternating order; figures are medians (default 1)")
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
    p.add_argument("--out", type=Path, help="output folder (default: a new folder under runs/)")


def settings_from_args(args: argparse.Namespace):
    from ..bench.spec import BenchSettings

    workload = args.workload or ("digits-cnn" if args.accuracy else "synthetic-cnn")
    if args.lr is not None and not args.lr > 0:
        raise UsageError(f"--lr {args.lr}: must be greater than 0")
    if args.lr_warmup_steps is not None and args.lr_warmup_steps < 0:
        raise UsageError(f"--lr-warmup-steps {args.lr_warmup_steps}: must be 0 or more")
    return BenchSettings(workload=workload, model=args.model, dataset=args.dataset, batch_size=args.batch_size,
                         steps=args.steps, warmup=args.warmup, accuracy=args.accuracy, epochs=args.epochs,
                         lr=args.lr, lr_warmup_steps=args.lr_warmup_steps, seed=args.seed,
                         backend=None if args.backend == "auto" else args.backend,
                         device=None if args.device == "auto" else args.device)


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
    from ..environment import detect
    from ..files import write_json_atomic
    from .outdir import default_out

    names = parse_strategies(args.strategy)
    rules = parse_rules(args.lr_scaling, False)
    if len(names) != 1 or len(rules) != 1:
        raise UsageError("a launched bench measures one configuration: give one --strategy and one --lr-scaling")
    env = detect(os.environ)
    result = measure(settings, names[0], args.threads, rules[0])
    if env.rank == 0:
        out = args.out or default_out(f"bench-{names[0]}", env.world_size)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / RESULT_FILE, result)
    return 0


def run(args: argparse.Namespace) -> int:
    from ..environment import detect

    settings = settings_from_args(args)
    if detect(os.environ).launched:
        return be_a_rank(args, settings)
    return orchestrate(args, settings)


def orchestrate(args: argparse.Namespace, settings) -> int:
    from ..backends import choose_backend
    from ..bench.configs import bench_configs
    from ..devices import choose_device, cpu_cores
    from .outdir import check_out, create_out, default_out
    from .plan_cmd import options_from_args, workload_from_args

    strategies = parse_strategies(args.strategy)
    nprocs = parse_int_list(args.nproc, "--nproc")
    rules = parse_rules(args.lr_scaling, args.accuracy)
    device = choose_device(settings.device, 0)
    choose_backend(settings.backend, device.type)
    args.workload = settings.workload
    workload = workload_from_args(args)
    try:
        import matplotlib  # noqa: F401  (the plots need it; find out before measuring)
    except ImportError:
        raise UsageError("bench draws its plots with matplotlib, which is not installed; "
                         "pip install matplotlib (or pip install 'scaletrain[plots]')") from None
    configs, notes = bench_configs(strategies, nprocs, rules, cpu_cores() if device.type == "cpu" else None,
                                   settings.accuracy)
    if len(configs) < 2:
        raise UsageError(f"nothing to compare with the baseline: {'; '.join(notes) or 'no configuration'}; "
                         "use --strategy ddp --nproc 1,2")
    if args.nproc_per_node is None and device.type == "cpu":
        args.nproc_per_node = max(nprocs)  # bench runs every configuration on this one machine
    options = options_from_args(args, device.type)
    out = create_out(check_out(args.out or default_out("bench", max(nprocs))))
    return measure_and_report(args, settings, workload, configs, notes, nprocs, options, out)


def measure_and_report(args, settings, workload, configs, notes, nprocs, options, out: Path) -> int:
    from ..version import __version__
    from ..bench.orchestrate import combine, run_rounds
    from ..bench.plots import ACCURACY_PNG, BREAKDOWN_PNG, SPEEDUP_PNG, accuracy_plot, breakdown_plot, speedup_plot
    from ..bench.report import print_table, write_outputs
    from ..plan.make import make_probe
    from ..plan.predict import predict

    import torch

    started = time.perf_counter()
    say = lambda text: print(text, flush=True)  # noqa: E731
    say(f"scaletrain bench: {workload.name}, batch {settings.batch_size} per process, "
        f"{'accuracy over whole epochs' if settings.accuracy else f'{settings.steps} measured steps'}, "
        f"{len(configs)} configurations × {args.repeat} round(s); writing {out}")
    for note in notes:
        say(f"  note: {note}")
    probe = None
    if not args.no_predict:
        say("  measuring one process and the all_reduce for the predictions ...")
        spec = {"workload": settings.workload, "model": settings.model, "dataset": settings.dataset}
        probe = make_probe(workload, spec, settings.batch_size, nprocs, options, device=settings.device,
                           backend=settings.backend, comm_json=args.comm, steps=settings.steps, warmup=settings.warmup,
                           seed=settings.seed, rounds=args.probe_rounds)
    results = run_rounds(settings, configs, args.repeat, out, say)
    rows = combine(configs, results)
    for row in rows:
        prediction = predict(probe, row["strategy"], row["nproc"], options) if probe else None
        if prediction is not None and not row["baseline"]:
            row["predicted_speedup"] = prediction.speedup
            row["predicted_step_s"] = prediction.step_s
            row["predicted_exposed_comm_s"] = prediction.exposed_comm_s
    device = rows[0]["device"]
    title = (f"{workload.name}, batch {settings.batch_size}/process, {rows[0]['backend']} on {device} "
             f"({options.cores} cores), torch {torch.__version__}")
    document = {"settings": settings.as_dict(), "title": title, "configurations": rows, "notes": notes,
                "probe": probe.as_dict() if probe else None, "scaletrain_version": __version__,
                "torch_version": torch.__version__, "cores": options.cores, "wall_seconds": None}
    print_table(rows, title, settings.accuracy)
    speedup_plot(rows, out / SPEEDUP_PNG, title)
    breakdown_plot(rows, out / BREAKDOWN_PNG, title)
    plots = [out / SPEEDUP_PNG, out / BREAKDOWN_PNG]
    if settings.accuracy:
        plots.append(accuracy_plot(rows, out / ACCURACY_PNG, title))
    document["wall_seconds"] = time.perf_counter() - started
    written = write_outputs(out, document, title, settings.accuracy)
    say(f"written: {', '.join(str(p) for p in [*written, *plots])} "
        f"({document['wall_seconds']:.0f} s)")
    return 0
