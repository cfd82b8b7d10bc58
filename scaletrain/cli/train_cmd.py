"""`scaletrain train`: train a workload with a strategy on one or many processes.

Not launched by anything: validate everything, create the output folder, write the run's
configuration there (config.yaml), then start the processes, which read it back. Started by
a launcher (torchrun, mpirun, srun, spawn): be one rank.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .. import netif
from ..backends import choose_backend
from ..devices import choose_device, cpu_cores
from ..environment import detect
from ..strategies import REGISTRY, get_strategy, implied_strategy, strategy_names
from ..track import check_trackers
from ..train.config import TrainConfig
from ..train.finite import TrainingDiverged
from ..workloads import BUILTIN, get_workload
from ..workloads.tasks import TASKS
from . import config_file
from .config_file import CONFIG_FILE
from .launch_options import add_launch_arguments, launch_request, launch_requested, runs_elsewhere
from .fault_options import (add_fault_arguments, check_continuable, check_fault_flags, check_resume, describe_resume,
                            fault_config, out_may_hold_files, restart_argv)
from .outdir import check_out, create_out, default_out, hold_out, owned_by_parent, refuse_if_held
from .parsing import OneLineParser, positive_float, positive_int
from .strategy_options import add_strategy_arguments, common_option_defaults, strategy_options_from_args
from .perf_options import add_memory_arguments, add_perf_arguments, apply_perf_options
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
    p.add_argument("--epochs", type=positive_int,
                   help="passes over the training data (default: the workload's; with --max-steps, as many as it takes)")
    p.add_argument("--max-steps", type=positive_int, metavar="N",
                   help="stop after N optimizer steps, with the final evaluation and checkpoint as at an epoch's end")
    p.add_argument("--batch-size", type=positive_int, default=32, help="samples per process per step (default 32)")
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
    config = TrainConfig(strategy=args.strategy, workload=args.workload, model=args.model, dataset=args.dataset,
                         epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
                         eval_batch_size=args.eval_batch_size,
                         lr=args.lr, task=None if args.task == "auto" else args.task,
                         clip_grad_norm=args.clip_grad_norm, seed=args.seed, backend=None if args.backend == "auto" else args.backend,
                         device=None if args.device == "auto" else args.device, threads=args.threads,
                         strategy_options=options, auto_choice=getattr(args, "auto_choice", None), **fault_config(args),
                         **track_config(args))
    return apply_perf_options(args, config)


def default_nproc(strategy: str) -> int:
    import torch

    if strategy in REGISTRY and not REGISTRY[strategy].multi_process:
        return 1
    return torch.cuda.device_count() or cpu_cores()


def validate(config: TrainConfig, nproc: int, here: bool = True):
    """Everything that can be checked before a process starts, so mistakes cost seconds.
    Returns the strategy and the model it was checked with. `here`: False for a batch
    script written for other machines, whose devices this host need not have."""
    netif.check_interfaces(os.environ)  # GLOO_SOCKET_IFNAME=eth99 would fail deep inside start-up
    strategy = get_strategy(config.strategy, **config.strategy_options)
    strategy.check_world_size(nproc)
    if here:
        device = choose_device(config.device, 0)
        choose_backend(config.backend, device.type)
        strategy.check_device(device.type)
    check_trackers(config.trackers)
    workload = get_workload(config.workload, config.model, config.dataset)
    model = workload.build_model()
    strategy.preflight(nproc, model, config.batch_size)  # splits, stages, micro-batches
    if config.dataset:
        workload.build_datasets(config.seed)
    return strategy, model


def resume_facts(config: TrainConfig, strategy, world_size: int) -> dict:
    """What a checkpoint to resume must agree with (see checkpoint.compat)."""
    return {"grad_accum": strategy.grad_accum, "batch_size": config.batch_size, "world_size": world_size,
            "strategy": strategy.name}


def resolve_workload_defaults(config: TrainConfig, args: argparse.Namespace) -> None:
    """Epochs and learning rate left to the workload become explicit, in both (so the
    recorded configuration says what ran)."""
    workload = get_workload(config.workload, config.model, config.dataset)
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
    from ..train.loop import train

    if args.config:
        argv = args.argv[args.argv.index(NAME) + 1:] if NAME in args.argv else []
        args = config_file.apply(args, build_parser, argv)
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
    strategy, model = validate(config, nproc, here=not runs_elsewhere(args))
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
        with hold_out(out, out_may_hold_files(args, out)):
            config_file.write(out / CONFIG_FILE, recorded)
            train(config, out, resume_checked=True)
        return 0
    return launch_ranks(args, out, nproc, recorded, node_rank)


def launch_ranks(args: argparse.Namespace, out: Path, nproc: int, recorded: dict, node_rank: int) -> int:
    """Starts the ranks (and restarts them, with --max-restarts); they read the configuration
    from the file written here, never from this command line."""
    from ..launchers import facade
    from ..launchers.plan import Target
    from ..launchers.restart import run_with_restarts

    with config_for_ranks(args, out, recorded, node_rank) as (config_path, prepare):
        train_argv = ["train", "--config", str(config_path), "--out", str(out)]

        def attempt(number: int) -> int:
            argv = restart_argv(train_argv, out) if number else train_argv
            request = launch_request(args, Target(module="scaletrain", args=tuple(argv)), nproc, device=args.device)
            return facade.run(request, args.dry_run, prepare if number == 0 else None)

        status = run_with_restarts(attempt, 0 if args.dry_run else args.max_restarts, lambda: describe_resume(out))
    if args.sbatch and not args.dry_run and status == 0:  # the batch job's ranks read it when the job runs
        config_file.write(create_out(out) / CONFIG_FILE, recorded)
    return status


@contextlib.contextmanager
def config_for_ranks(args: argparse.Namespace, out: Path, recorded: dict, node_rank: int):
    """(the file the ranks read, a function that writes it once every check has passed).

    One command starting every rank (spawn, mpirun, srun, torchrun on one node, or node 0 of
    torchrun with --node-rank): the run's own OUT/config.yaml. One command per node, on a
    node that is not node 0 or may not be (--node-rank N, or --rdzv-endpoint, where the
    nodes number themselves): a private copy on this node, since OUT may be node 0's folder
    on a shared filesystem; rank 0 writes OUT/config.yaml then."""
    # Node 0's command creates the output folder and holds it while the job runs. Nodes that
    # number themselves (--rdzv-endpoint) cannot tell which is node 0: their rank 0 holds it.
    owns_out = not (node_rank or args.rdzv_endpoint)
    held = contextlib.ExitStack()

    def hold() -> None:
        if owns_out:
            held.enter_context(hold_out(out, out_may_hold_files(args, out)))

    with held:
        if not (node_rank or args.rdzv_endpoint):
            yield out / CONFIG_FILE, lambda: (hold(), config_file.write(out / CONFIG_FILE, recorded))
            return
        if args.dry_run:
            yield Path(tempfile.gettempdir()) / "scaletrain-node-XXXX" / CONFIG_FILE, None
            return
        folder = Path(tempfile.mkdtemp(prefix="scaletrain-node-"))

        def prepare() -> None:
            if not node_rank:
                create_out(out)
            hold()
            config_file.write(folder / CONFIG_FILE, recorded)

        try:
            yield folder / CONFIG_FILE, prepare
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def run_rank(args: argparse.Namespace, env, config: TrainConfig) -> int:
    """One rank of a job started by a launcher: by `scaletrain train` itself (the settings
    come from the run's config.yaml) or directly by torchrun, mpirun or srun."""
    from ..train.loop import train

    if args.nproc_per_node and args.nproc_per_node != env.local_world_size:
        print(f"scaletrain: note: --nproc-per-node {args.nproc_per_node} ignored: the {env.launcher} launcher "
              f"started {env.local_world_size} process(es) on this node", file=sys.stderr)
    check_fault_flags(args, env, args.out)
    out = Path(args.out or default_out(config.strategy, env.world_size))
    resolve_workload_defaults(config, args)
    own_record = out / CONFIG_FILE
    by_own_command = bool(args.config) and Path(args.config).absolute() == own_record.absolute()
    # Decided before rank 0 may take the folder itself (which marks it held in this process):
    # a `scaletrain train` command holding it has checked the resume and shown its notes.
    started_by_command = owned_by_parent(out)
    with contextlib.ExitStack() as held:
        if not by_own_command:
            # Started by torchrun, mpirun or srun directly (or reading a node's private copy):
            # rank 0 writes the run's own record, and owns the folder unless the command that
            # started this node's ranks does.
            if not started_by_command and args.resume == "auto":
                check_continuable(out, config.epochs, config.max_steps)
            if env.rank == 0:
                if not started_by_command:
                    held.enter_context(hold_out(out, may_hold_files=True))
                config_file.write(own_record, record(args, nproc_per_node=env.local_world_size, nnodes=env.nnodes))
        try:
            # Under torchrun/mpirun/srun directly, rank 0 shows the resume's notes.
            train(config, out, resume_checked=started_by_command)
        except TrainingDiverged:
            if env.rank != 0:  # rank 0 says it; the others stop with the same status, silently
                return TrainingDiverged.STATUS
            raise
    return 0
