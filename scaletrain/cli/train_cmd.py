"""`scaletrain train`: train a workload with a strategy on one or many processes.

Not launched by anything: parse → one frozen TrainConfig → checks → launch → ranks that
build the model once. The flags (generated from TrainConfig's fields) and the --config file
become the TrainConfig at once; it is checked here without building the model for real (the
strategy's checks get a meta-device model: no memory, no time), its defaults resolved (each a
new TrainConfig); the output folder is created and locked and config.yaml written; then the
ranks start with that TrainConfig in their argv (cli/train_rank.py) and train. Started by a
launcher directly (torchrun, mpirun, srun running `-m scaletrain train`): be one rank.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import replace
from pathlib import Path

from .. import netif
from ..backends import choose_backend
from ..devices import choose_device, cpu_cores
from ..environment import DistEnv, detect
from ..errors import UsageError
from ..options import add_declared_arguments
from ..steady_memory import pass_on
from ..strategies import REGISTRY, get_strategy
from ..strategies.flags import add_strategy_arguments, common_option_defaults
from ..track import check_reachable, check_trackers
from ..train.config import TrainConfig
from ..workloads.model_config import workload_for
from ..workloads.factories import load_factory
from ..workloads.meta import meta_model
from . import config_file
from .config_file import CONFIG_FILE
from .outdir import check_out, create_out, default_out, discard_unstarted, hold_out, refuse_if_held
from .parsing import OneLineParser
from .resume_checks import (check_continuable, check_fault_flags, check_resume, describe_resume,
                            out_may_hold_files, resume_on_restart)
from .train_rank import said_by_this_rank
from ..values import AUTO

NAME = "train"
HELP = "train a model (the built-in digits CNN by default) with a strategy on N processes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_declared_arguments(p, TrainConfig, nproc_default="one per GPU, else one per CPU core; 1 for one-process "
                                                         "strategies",
                           between={"strategy_options": add_strategy_arguments})


def build_parser() -> OneLineParser:
    """`scaletrain train`'s own parser: its flags, and the schema of its configuration files."""
    p = OneLineParser(prog=f"scaletrain {NAME}", description=HELP)
    add_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    if args.config:
        argv = args.argv[args.argv.index(NAME) + 1:] if NAME in args.argv else []
        args = config_file.apply(args, build_parser, argv)
    return train_command(TrainConfig.from_args(args), detect(os.environ))


def train_command(config: TrainConfig, env: DistEnv) -> int:
    pass_on(config.steady_memory)
    # A process that stands for a whole node (a Kubernetes pod) starts the node's ranks when
    # asked for several; otherwise a launched process is one rank of someone else's job.
    if env.launched and not (env.per_node and (config.launch.nproc_per_node or 1) > 1):
        return run_rank(config, env)
    launch = config.launch
    nproc = launch.nproc_per_node or default_nproc(config.strategy)
    if REGISTRY[config.strategy].measured_choice:  # auto: chosen by measuring, then trained as if given
        from .auto_choice import resolve_auto

        config = resolve_auto(config, nproc)
        for line in config.auto_choice.split(". "):
            print(f"scaletrain: {line.rstrip('.')}.", flush=True)
    config, strategy, model = validate(config, nproc)
    config = with_workload_defaults(config)
    check_fault_flags(config, env)
    config = replace(config, out=Path(config.out or default_out(config.strategy, nproc)).expanduser().absolute())
    # Node 0 owns the output folder (rank 0 writes it); other nodes must not refuse it, and
    # --resume auto continues the run already in it.
    node_rank = launch.node_rank if launch.node_rank is not None else (env.node_rank if env.per_node else 0)
    if not (node_rank or launch.rdzv_endpoint or launch.dry_run):
        refuse_if_held(config.out)  # first: a live run's folder is refused for that, whatever it holds
    for note in check_resume(config, model, resume_facts(config, strategy, nproc * (launch.nnodes or 1))):
        print(f"scaletrain: note: {note}", file=sys.stderr)
    if not node_rank and not out_may_hold_files(config):
        check_out(config.out)
    del model  # built for the checks only: a run in this process builds its own
    recorded = record(config, nproc_per_node=recorded_nproc(config, nproc))
    if nproc == 1 and not launch.requested and not config.max_restarts:
        return train_here(config, recorded)
    return launch_ranks(config, nproc, recorded, node_rank)


def default_nproc(strategy: str) -> int:
    import torch

    if not REGISTRY[strategy].multi_process:
        return 1
    return torch.cuda.device_count() or cpu_cores()


def validate(config: TrainConfig, nproc: int):
    """Everything that can be checked before a process starts, so mistakes cost seconds.
    Returns the configuration (trackers whose server does not answer left out, where
    --if-tracker-unreachable skip says so), the strategy and the model it was checked with:
    built on the meta device, so it takes no memory and next to no time (the ranks build the
    real one, once). A batch script written for other machines is not checked against this
    host's devices. The data is checked by the ranks, before their first step."""
    netif.check_interfaces(os.environ)  # GLOO_SOCKET_IFNAME=eth99 would fail deep inside start-up
    strategy = get_strategy(config.strategy, **config.strategy_options)
    strategy.check_world_size(nproc)
    if not config.launch.elsewhere:
        device = choose_device(config.device, 0)
        choose_backend(config.backend, device.type)
        strategy.check_device(device.type)
    check_trackers(config.trackers)
    config = replace(config, trackers=tuple(check_reachable(config.trackers, config.if_tracker_unreachable)))
    workload = workload_for(config)
    if config.dataset:
        load_factory(config.dataset, "--dataset")  # importable (the ranks build it, and check what it gives)
    model = meta_model(workload)
    strategy.preflight(nproc, model, config.batch_size)  # splits, stages, micro-batches
    return config, strategy, model


def resume_facts(config: TrainConfig, strategy, world_size: int) -> dict:
    """What a checkpoint to resume must agree with (see checkpoint.compat)."""
    return {"grad_accum": strategy.grad_accum, "batch_size": config.batch_size, "world_size": world_size,
            "data_parallel_size": strategy.dims(world_size).dp_size, "strategy": strategy.name}


def with_workload_defaults(config: TrainConfig) -> TrainConfig:
    """Epochs and learning rate left to the workload made explicit (so the recorded
    configuration says what ran); with --max-steps alone the ranks take the epochs it needs."""
    workload = workload_for(config)
    epochs = config.epochs if config.max_steps is not None else config.epochs or workload.epochs
    return replace(config, epochs=epochs, lr=config.lr if config.lr is not None else workload.lr)


def record(config: TrainConfig, **resolved) -> dict:
    """The run's configuration as config.yaml holds it: every flag's value, `resolved` ones
    (what the defaults came to) included. Of the strategy options, those every strategy
    takes (precision, grad_accum, compile) are always there; the others only when given."""
    values = {**common_option_defaults(), **config.flag_values(), **resolved}
    return config_file.record(argparse.Namespace(**values), build_parser())


def recorded_nproc(config: TrainConfig, nproc: int):
    """The processes per node to record: the number used where scaletrain chose it; left as
    given where the hosts' slots or the Slurm allocation decide (they decide again on a repeat)."""
    launch = config.launch
    decided_elsewhere = launch.hostfile or launch.hosts or launch.launcher == "srun" or os.environ.get("SLURM_JOB_ID")
    return launch.nproc_per_node if decided_elsewhere else (launch.nproc_per_node or nproc)


def train_here(config: TrainConfig, recorded: dict) -> int:
    """One process, in this one: holds the folder, writes config.yaml, trains."""
    from ..train.loop import train

    created = not config.out.exists()
    with hold_out(config.out, out_may_hold_files(config)):
        config_file.write(config.out / CONFIG_FILE, recorded)
        try:
            train(config, config.out, resume_checked=True)
        except UsageError:
            discard_unstarted(config.out, created)
            raise
    return 0


def launch_ranks(config: TrainConfig, nproc: int, recorded: dict, node_rank: int) -> int:
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
    launch, out = config.launch, config.out
    owns_out = not (node_rank or launch.rdzv_endpoint)
    record_for_rank = recorded if launch.rdzv_endpoint else None
    created = not out.exists()
    with contextlib.ExitStack() as held:
        def prepare() -> None:
            if owns_out:
                held.enter_context(hold_out(out, out_may_hold_files(config)))
                config_file.write(out / CONFIG_FILE, recorded)
            elif not node_rank:
                create_out(out)

        def attempt(number: int) -> int:
            this = replace(config, resume=resume_on_restart(config.resume, out) if number else config.resume)
            request = launch.request(Target(module=MODULE, args=rank_args(this, record_for_rank)), nproc,
                                     device=config.device, timeout=config.timeout_seconds)
            return facade.run(request, launch.dry_run, prepare if number == 0 else None)

        status = run_with_restarts(attempt, 0 if launch.dry_run else config.max_restarts, lambda: describe_resume(out))
        if status == 2 and owns_out and not launch.sbatch:  # a one-line mistake the ranks found
            discard_unstarted(out, created)
    if launch.sbatch and not launch.dry_run and status == 0:  # for the user: the batch job's ranks need no file
        config_file.write(create_out(out) / CONFIG_FILE, recorded)
    return status


def run_rank(config: TrainConfig, env: DistEnv) -> int:
    """One rank of a job that torchrun, mpirun or srun started directly (`-m scaletrain
    train ...`): its flags are its own to resolve; rank 0 owns the output folder and writes
    the run's config.yaml (unless it was started with that very file as --config)."""
    from ..train.loop import train

    if config.launch.dry_run:  # a dry run never trains, whoever started it
        print(f"dry run: rank {env.rank} of {env.world_size} (started by {env.launcher}) would train "
              f"--strategy {config.strategy} on {config.workload}; nothing was started")
        return 0
    nproc = config.launch.nproc_per_node
    if nproc and nproc != env.local_world_size and env.local_rank == 0:  # once per node, not once per rank
        print(f"scaletrain: note: --nproc-per-node {nproc} ignored: the {env.launcher} launcher "
              f"started {env.local_world_size} process(es) on this node", file=sys.stderr)
    check_fault_flags(config, env)
    config = with_workload_defaults(replace(config, out=Path(config.out or default_out(config.strategy,
                                                                                        env.world_size))))
    if env.rank == 0:  # the rank that records the run: its trackers' servers must answer
        config = replace(config, trackers=tuple(check_reachable(config.trackers, config.if_tracker_unreachable)))
    own_record = config.out / CONFIG_FILE
    reads_own_record = bool(config.config_file) and Path(config.config_file).absolute() == own_record.absolute()
    if config.resume == AUTO:
        check_continuable(config.out, config.epochs, config.max_steps)
    with contextlib.ExitStack() as held:
        if env.rank == 0:
            held.enter_context(hold_out(config.out, may_hold_files=True))
            if not reads_own_record:
                config_file.write(own_record, record(config, nproc_per_node=env.local_world_size, nnodes=env.nnodes))
        try:
            train(config, config.out)  # rank 0 shows the resume's notes
        except UsageError as exc:
            if not said_by_this_rank(exc, env.rank):  # rank 0 says it; the others stop silently
                return 2
            raise
    return 0
