"""`scaletrain train`: train a workload with a strategy on one or many processes.

Not launched by anything: parse → a validated configuration → launch → ranks that build
the model once. The flags (and --config file) become one TrainConfig, checked here without
building the model for real (the strategy's checks get a meta-device model: no memory, no
time), its defaults resolved; the output folder is created and locked and config.yaml
written; then the ranks start with that TrainConfig in their argv (cli/train_rank.py) and
train. Started by a launcher directly (torchrun, mpirun, srun running `-m scaletrain
train`): be one rank.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from pathlib import Path

from .. import netif
from ..backends import choose_backend
from ..defaults import BENCH_MAX_OTHER_CORES
from ..devices import choose_device, cpu_cores
from ..environment import detect
from ..errors import UsageError
from ..strategies import REGISTRY, get_strategy, implied_strategy, strategy_names
from ..track import check_reachable, check_trackers
from ..train.config import TrainConfig
from ..workloads import BUILTIN, get_workload
from ..workloads.model_config import workload_for
from ..workloads.factories import load_factory
from ..workloads.tasks import TASKS
from . import config_file
from .config_file import CONFIG_FILE
from .launch_options import add_launch_arguments, launch_request, launch_requested, runs_elsewhere
from .fault_options import (add_fault_arguments, check_continuable, check_fault_flags, check_resume, describe_resume,
                            fault_config, out_may_hold_files, resume_on_restart)
from .outdir import check_out, create_out, default_out, discard_unstarted, hold_out, refuse_if_held
from .train_rank import said_by_this_rank
from .parsing import OneLineParser, positive_float, positive_int
from .strategy_options import add_strategy_arguments, common_option_defaults, strategy_options_from_args
from .perf_options import add_memory_arguments, add_perf_arguments, apply_perf_options, apply_steady_memory
from .track_options import add_track_arguments, track_config

NAME = "train"
HELP = "train a model (the built-in digits CNN by default) with a strategy on N processes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE",
                   help=f"take the settings from a YAML or TOML file whose keys are these flags' long names with _ "
                        f"for - (batch_size: 64); flags given here override it. Every run writes its own as "
                        f"OUT/{CONFIG_FILE}: --config runs/X/{CONFIG_FILE} repeats run X")
    p.add_argument("--strategy", choices=[*strategy_names(), "auto"], metavar="NAME",
                   help=f"how to spread the work: {', '.join(f'{n} ({c.help})' for n, c in REGISTRY.items())}; "
                        f"auto (a short measurement, every configuration that fits predicted, the fastest chosen). "
                        f"Default: ddp, or what the degrees given imply (--pp: pipeline; --dp-shard or --dp-replicate: "
                        f"fsdp; --tp: tp)")
    p.add_argument("--workload", default="digits-cnn", choices=list(BUILTIN), metavar="NAME",
                   help="built-in workload: " + "; ".join(f"{w.name}: {w.description}" for w in BUILTIN.values()))
    p.add_argument("--model", metavar="MODULE:FUNCTION", help="your model factory, returning a torch.nn.Module")
    p.add_argument("--dataset", metavar="MODULE:FUNCTION",
                   help="your dataset factory, returning a Dataset (split by --seed) or a (train, held_out) pair")
    p.add_argument("--model-config", metavar="NAME|FILE",
                   help="a causal language model built from a transformers config.json or a built-in shape "
                        "(llama3-8b, llama3-70b, llama3-405b), trained on synthetic tokens (speed work; as "
                        "`scaletrain plan --hardware` plans it)")
    p.add_argument("--seq-len", type=positive_int, metavar="S",
                   help="tokens per sequence of a language model: stdlib-gpt (default 64), --model-config (default 2048)")
    p.add_argument("--epochs", type=positive_int,
                   help="passes over the training data (default: the workload's; with --max-steps, as many as it takes)")
    p.add_argument("--max-steps", type=positive_int, metavar="N",
                   help="stop after N optimizer steps, with the final evaluation and checkpoint as at an epoch's end")
    p.add_argument("--batch-size", type=positive_int,
                   help="samples per process per step (default 32; stdlib-gpt with --seq-len: as many as make 2,048 "
                        "tokens, at least 1)")
    p.add_argument("--eval-batch-size", type=positive_int, default=256, help="samples per process per evaluation step")
    p.add_argument("--lr", type=positive_float, help="learning rate (default: the workload's)")
    p.add_argument("--task", choices=["auto", *TASKS], default="auto",
                   help="what the model learns, which decides loss and held-out metrics: classification (accuracy), "
                        "regression (MSE), lm (per-position cross-entropy; perplexity), own (the model returns its "
                        "loss, e.g. dict batches with labels); auto: the workload's, or told from your dataset's "
                        "samples")
    p.add_argument("--clip-grad-norm", type=positive_float, metavar="MAX",
                   help="scale gradients down to this norm (the whole model's, across shards and stages) before "
                        "each optimizer step")
    p.add_argument("--seed", type=seed_value, default=0,
                   help=f"seeds weights, held-out split and shuffling, 0 to {MAX_SEED} (default 0)")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl", "mpi", "ccl"], default="auto",
                   help="communication backend (default: nccl on CUDA, gloo on CPU)")
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")
    p.add_argument("--threads", type=positive_int, help="CPU threads per process (default: cores ÷ processes)")
    p.add_argument("--out", type=Path, help="output folder (default: a new folder under runs/)")
    p.add_argument("--auto-choice", help=argparse.SUPPRESS)  # why --strategy auto chose what this run trains
    p.add_argument("--max-other-load", type=positive_float, default=BENCH_MAX_OTHER_CORES, metavar="CORES",
                   help="with --strategy auto: a round of its measurement during which other processes kept more "
                        f"than this many cores busy is left out and run again (default {BENCH_MAX_OTHER_CORES:g})")
    add_launch_arguments(p, "one per GPU, else one per CPU core; 1 for one-process strategies")
    add_fault_arguments(p)
    add_strategy_arguments(p)
    add_perf_arguments(p)
    add_memory_arguments(p)
    add_track_arguments(p)


MAX_SEED = 2**32 - 1  # NumPy's and scikit-learn's seeds are 32-bit; torch's would take more


def seed_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {MAX_SEED}, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_SEED}, got {text}")
    return value


def build_parser() -> OneLineParser:
    """`scaletrain train`'s own parser: its flags, and the schema of its configuration files."""
    p = OneLineParser(prog=f"scaletrain {NAME}", description=HELP)
    add_arguments(p)
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    options = strategy_options_from_args(args)
    args.strategy = args.strategy or implied_strategy(options)  # recorded as resolved
    args.batch_size = args.batch_size or default_batch_size(args)
    config = TrainConfig(strategy=args.strategy, workload=args.workload, model=args.model, dataset=args.dataset,
                         model_config=args.model_config, seq_len=args.seq_len,
                         epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
                         eval_batch_size=args.eval_batch_size,
                         lr=args.lr, task=None if args.task == "auto" else args.task,
                         clip_grad_norm=args.clip_grad_norm, seed=args.seed, backend=None if args.backend == "auto" else args.backend,
                         device=None if args.device == "auto" else args.device, threads=args.threads,
                         strategy_options=options, auto_choice=getattr(args, "auto_choice", None), **fault_config(args),
                         **track_config(args))
    return apply_perf_options(args, config)


def default_batch_size(args: argparse.Namespace) -> int:
    """The workload's batch size (a language model's with --seq-len holds its tokens per batch)."""
    if args.model_config:
        return TrainConfig.batch_size
    return get_workload(args.workload, args.model, args.dataset, args.seq_len).batch_size


def default_nproc(strategy: str) -> int:
    import torch

    if strategy in REGISTRY and not REGISTRY[strategy].multi_process:
        return 1
    return torch.cuda.device_count() or cpu_cores()


def validate(config: TrainConfig, nproc: int, here: bool = True, if_unreachable: str = "stop"):
    """Everything that can be checked before a process starts, so mistakes cost seconds.
    Returns the strategy and the model it was checked with: built on the meta device, so
    it takes no memory and next to no time (the ranks build the real one, once). `here`:
    False for a batch script written for other machines, whose devices this host need not
    have. The data is checked by the ranks, before their first step. A tracker whose
    server does not answer stops the run here, or is left out (`if_unreachable`)."""
    netif.check_interfaces(os.environ)  # GLOO_SOCKET_IFNAME=eth99 would fail deep inside start-up
    strategy = get_strategy(config.strategy, **config.strategy_options)
    strategy.check_world_size(nproc)
    if here:
        device = choose_device(config.device, 0)
        choose_backend(config.backend, device.type)
        strategy.check_device(device.type)
    check_trackers(config.trackers)
    config.trackers = check_reachable(config.trackers, if_unreachable)
    workload = workload_for(config)
    if config.dataset:
        load_factory(config.dataset, "--dataset")  # importable (the ranks build it, and check what it gives)
    model = meta_model(workload)
    strategy.preflight(nproc, model, config.batch_size)  # splits, stages, micro-batches
    workload.check_context_parallel(strategy.dims(nproc).cp)  # sequences it can split
    return strategy, model


def meta_model(workload):
    """The workload's model with its parameters on the meta device (shapes and names only).
    A factory that cannot build there (it loads weights from a file, say) is built as it is."""
    import torch

    try:
        with torch.device("meta"):
            return workload.build_model()
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 - whatever the factory needs that meta tensors lack
        return workload.build_model()


def resume_facts(config: TrainConfig, strategy, world_size: int) -> dict:
    """What a checkpoint to resume must agree with (see checkpoint.compat)."""
    return {"grad_accum": strategy.grad_accum, "batch_size": config.batch_size, "world_size": world_size,
            "strategy": strategy.name}


def resolve_workload_defaults(config: TrainConfig, args: argparse.Namespace) -> None:
    """Epochs and learning rate left to the workload become explicit, in both (so the
    recorded configuration says what ran)."""
    workload = workload_for(config)
    if config.max_steps is None:  # with --max-steps alone the ranks take the epochs it needs
        config.epochs = args.epochs = config.epochs or workload.epochs
    config.lr = args.lr = config.lr if config.lr is not None else workload.lr


def record(args: argparse.Namespace, **resolved) -> dict:
    """The run's configuration as config.yaml holds it: every flag's value, `resolved` ones
    (what the defaults came to) included. Of the strategy options, those every strategy
    takes (precision, grad_accum, compile) are always there; the others only when given."""
    return config_file.record(argparse.Namespace(**{**common_option_defaults(), **vars(args), **resolved}),
                              build_parser())


def recorded_nproc(args: argparse.Namespace, nproc: int):
    """The processes per node to record: the number used where scaletrain chose it; left as
    given where the hosts' slots or the Slurm allocation decide (they decide again on a repeat)."""
    decided_elsewhere = args.hostfile or args.hosts or args.launcher == "srun" or os.environ.get("SLURM_JOB_ID")
    return args.nproc_per_node if decided_elsewhere else (args.nproc_per_node or nproc)


def run(args: argparse.Namespace) -> int:
    if args.config:
        argv = args.argv[args.argv.index(NAME) + 1:] if NAME in args.argv else []
        args = config_file.apply(args, build_parser, argv)
    apply_steady_memory(args)
    env = detect(os.environ)
    config = config_from_args(args)
    # A process that stands for a whole node (a Kubernetes pod) starts the node's ranks when
    # asked for several; otherwise a launched process is one rank of someone else's job.
    node_agent = env.per_node and (args.nproc_per_node or 1) > 1
    if env.launched and not node_agent and args.dry_run:  # a dry run never trains, whoever started it
        print(f"dry run: rank {env.rank} of {env.world_size} (started by {env.launcher}) would train "
              f"--strategy {config.strategy} on {config.workload}; nothing was started")
        return 0
    if env.launched and not node_agent:  # we are one rank of a job someone else started
        return run_rank(args, env, config)
    nproc = args.nproc_per_node or default_nproc(config.strategy)
    if config.strategy == "auto":
        from .auto_choice import resolve_auto

        args.auto_choice = " ".join(resolve_auto(args, nproc))
        for line in args.auto_choice.split(". "):
            print(f"scaletrain: {line.rstrip('.')}.", flush=True)
        config = config_from_args(args)
    strategy, model = validate(config, nproc, here=not runs_elsewhere(args),
                               if_unreachable=args.if_tracker_unreachable)
    resolve_workload_defaults(config, args)
    check_fault_flags(args, env, args.out)
    out = Path(args.out or default_out(config.strategy, nproc)).expanduser().absolute()
    # Node 0 owns the output folder (rank 0 writes it); other nodes must not refuse it, and
    # --resume auto continues the run already in it.
    node_rank = args.node_rank if args.node_rank is not None else (env.node_rank if node_agent else 0)
    if not (node_rank or args.rdzv_endpoint or args.dry_run):
        refuse_if_held(out)  # first: a live run's folder is refused for that, whatever it holds
    for note in check_resume(args, out, model, resume_facts(config, strategy, nproc * (args.nnodes or 1)),
                             config.epochs):
        print(f"scaletrain: note: {note}", file=sys.stderr)
    if not node_rank and not out_may_hold_files(args, out):
        check_out(out)
    recorded = record(args, nproc_per_node=recorded_nproc(args, nproc))
    del model  # built for the checks only: a run in this process builds its own
    if nproc == 1 and not launch_requested(args) and not args.max_restarts:
        from ..train.loop import train

        created = not out.exists()
        with hold_out(out, out_may_hold_files(args, out)):
            config_file.write(out / CONFIG_FILE, recorded)
            try:
                train(config, out, resume_checked=True)
            except UsageError:
                discard_unstarted(out, created)
                raise
        return 0
    return launch_ranks(args, out, nproc, recorded, node_rank, config)


def launch_ranks(args: argparse.Namespace, out: Path, nproc: int, recorded: dict, node_rank: int,
                 config: TrainConfig) -> int:
    """Starts the ranks (and restarts them, with --max-restarts) with the validated
    configuration in their argv; they parse nothing."""
    from ..launchers import facade
    from ..launchers.plan import Target
    from ..launchers.restart import run_with_restarts
    from .train_rank import MODULE, rank_args

    # Node 0's command creates the output folder, holds it while the job runs and writes
    # config.yaml, once every check has passed. Other nodes' commands take nothing; nodes
    # that number themselves (--rdzv-endpoint) cannot tell which is node 0: their rank 0
    # holds the folder and writes config.yaml.
    owns_out = not (node_rank or args.rdzv_endpoint)
    record = recorded if args.rdzv_endpoint else None
    created = not out.exists()
    with contextlib.ExitStack() as held:
        def prepare() -> None:
            if owns_out:
                held.enter_context(hold_out(out, out_may_hold_files(args, out)))
                config_file.write(out / CONFIG_FILE, recorded)
            elif not node_rank:
                create_out(out)

        def attempt(number: int) -> int:
            resume = resume_on_restart(config.resume, out) if number else config.resume
            this = dataclasses.replace(config, resume=resume)
            target = Target(module=MODULE, args=rank_args(this, out, record))
            request = launch_request(args, target, nproc, device=args.device)
            return facade.run(request, args.dry_run, prepare if number == 0 else None)

        status = run_with_restarts(attempt, 0 if args.dry_run else args.max_restarts, lambda: describe_resume(out))
        if status == 2 and owns_out and not args.sbatch:  # a one-line mistake the ranks found
            discard_unstarted(out, created)
    if args.sbatch and not args.dry_run and status == 0:  # for the user: the batch job's ranks need no file
        config_file.write(create_out(out) / CONFIG_FILE, recorded)
    return status


def run_rank(args: argparse.Namespace, env, config: TrainConfig) -> int:
    """One rank of a job that torchrun, mpirun or srun started directly (`-m scaletrain
    train ...`): its flags are its own to resolve; rank 0 owns the output folder and writes
    the run's config.yaml (unless it was started with that very file as --config)."""
    from ..train.loop import train

    if args.nproc_per_node and args.nproc_per_node != env.local_world_size:
        print(f"scaletrain: note: --nproc-per-node {args.nproc_per_node} ignored: the {env.launcher} launcher "
              f"started {env.local_world_size} process(es) on this node", file=sys.stderr)
    check_fault_flags(args, env, args.out)
    out = Path(args.out or default_out(config.strategy, env.world_size))
    resolve_workload_defaults(config, args)
    if env.rank == 0:  # the rank that records the run: its trackers' servers must answer
        config.trackers = check_reachable(config.trackers, args.if_tracker_unreachable)
    own_record = out / CONFIG_FILE
    reads_own_record = bool(args.config) and Path(args.config).absolute() == own_record.absolute()
    if args.resume == "auto":
        check_continuable(out, config.epochs, config.max_steps)
    with contextlib.ExitStack() as held:
        if env.rank == 0:
            held.enter_context(hold_out(out, may_hold_files=True))
            if not reads_own_record:
                config_file.write(own_record, record(args, nproc_per_node=env.local_world_size, nnodes=env.nnodes))
        try:
            train(config, out)  # rank 0 shows the resume's notes
        except UsageError as exc:
            if not said_by_this_rank(exc, env.rank):  # rank 0 says it; the others stop silently
                return 2
            raise
    return 0
