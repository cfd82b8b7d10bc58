"""`scaletrain train`: train a workload with a strategy on one or many processes.

Not launched by anything: parse → one frozen TrainConfig → checks → launch → ranks that
build the model once. The flags (generated from TrainConfig's fields: cli/train_flags.py) and
the --config file become the TrainConfig at once; it is checked (cli/train_checks.py), its
defaults resolved (each a new TrainConfig); the output folder is created and locked and
config.yaml written; then the ranks start with that TrainConfig in their argv
(cli/train_rank.py) and train — one process in this one, as a launched rank would. Started by
a launcher directly (torchrun, mpirun, srun running `-m scaletrain train`): be one rank.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from dataclasses import asdict, replace

from ..foundation.errors import UsageError
from ..memory.allocator import resolve as resolve_allocator
from ..process.devices import cpu_cores
from ..process.environment import DistEnv, detect
from ..process.startup_timeline import mark
from ..strategies import REGISTRY
from ..train.config import TrainConfig
from . import config_file
from .config_file import CONFIG_FILE
from .outdir import create_out, discard_unstarted, hold_out
from .perf_options import apply_process_memory
from .resume_checks import describe_resume, out_may_hold_files, resume_on_restart
from .train_checks import checked, node_rank_of
from .train_flags import HELP, NAME, add_arguments, build_parser, record  # noqa: F401 (the command's face)


def run(args: argparse.Namespace) -> int:
    return train_command(config_of(args), detect(os.environ))


def run_rank(args: argparse.Namespace) -> int:
    """A process a launcher started (`-m scaletrain train ...` under torchrun, mpirun, srun): one
    rank of that job — or, standing for a whole node (a Kubernetes pod) and asked for several
    processes, the command that starts the node's ranks."""
    from .train_rank import launched

    config, env = config_of(args), detect(os.environ)
    if env.per_node and (config.launch.nproc_per_node or 1) > 1:
        return train_command(config, env)
    return launched(config)


def config_of(args: argparse.Namespace) -> TrainConfig:
    """The flags, and the --config file's settings where no flag gives them, as one TrainConfig."""
    if args.config:
        argv = args.argv[args.argv.index(NAME) + 1:] if NAME in args.argv else []
        args = config_file.apply(args, build_parser, argv)
    return TrainConfig.from_args(args)


def train_command(config: TrainConfig, env: DistEnv) -> int:
    nproc = config.launch.nproc_per_node or default_nproc(config.strategy)
    mark("command: flags read")
    for step in BEFORE_LAUNCH:
        config = step(config, nproc, env)
        nproc = config.launch.nproc_per_node or nproc  # auto's choice may be fewer processes
    mark("command: checked")
    recorded = record(config, nproc_per_node=recorded_nproc(config, nproc))
    # One process trains here, unless this process runs another allocator than the one asked
    # for (--strategy auto chose one process): then it is started as a rank that runs it.
    if nproc == 1 and not config.launch.requested and not config.max_restarts and runs_here(config):
        return train_here(config, recorded)
    return launch_ranks(config, nproc, recorded, node_rank_of(config, env))


def process_memory_passed_on(config: TrainConfig, nproc: int, env: DistEnv) -> TrainConfig:
    """--steady-memory and --allocator for every process the command starts (auto's measurements too)."""
    apply_process_memory(config)  # the same two the other commands pass on from their flags
    return config


def chosen_if_auto(config: TrainConfig, nproc: int, env: DistEnv) -> TrainConfig:
    """auto: the configuration chosen by measuring (cli/auto_choice.py), then trained as if given."""
    if not REGISTRY[config.strategy].measured_choice:
        return config
    from .auto_choice import resolve_auto

    config = resolve_auto(config, nproc)
    for line in config.auto_choice.split(". "):
        print(f"scaletrain: {line.rstrip('.')}.", flush=True)
    return config


#: What the command makes of a configuration before anything starts, in order: each step takes
#: it and gives it back completed (a strategy chosen, defaults resolved) or refuses it in one line.
BEFORE_LAUNCH = (process_memory_passed_on, chosen_if_auto, checked)


def default_nproc(strategy: str) -> int:
    import torch

    if not REGISTRY[strategy].multi_process:
        return 1
    return torch.cuda.device_count() or cpu_cores()


def recorded_nproc(config: TrainConfig, nproc: int):
    """The processes per node to record: the number used where scaletrain chose it; left as
    given where the hosts' slots or the Slurm allocation decide (they decide again on a repeat)."""
    launch = config.launch
    decided_elsewhere = launch.hostfile or launch.hosts or launch.launcher == "srun" or os.environ.get("SLURM_JOB_ID")
    return launch.nproc_per_node if decided_elsewhere else (launch.nproc_per_node or nproc)


def runs_here(config: TrainConfig) -> bool:
    """Whether this process trains the run's one process: where it runs the allocator asked for,
    or where the command was called as a function (its caller's process trains, as it is)."""
    from ..memory.allocator import running
    from .allocator_choice import as_a_function

    return as_a_function or running() in (resolve_allocator(config.allocator, config.steady_memory), "unknown")


def train_here(config: TrainConfig, recorded: dict) -> int:
    """One process, in this one: holds the folder, writes config.yaml, and trains as the rank
    it would otherwise launch (the same configuration, as JSON)."""
    from .train_rank import train_here as rank

    created = not config.out.exists()
    with hold_out(config.out, out_may_hold_files(config)):
        config_file.write(config.out / CONFIG_FILE, recorded)
        try:
            rank(json.dumps(asdict(config), default=str))
        except UsageError:
            discard_unstarted(config.out, created)
            raise
    return 0


def launch_ranks(config: TrainConfig, nproc: int, recorded: dict, node_rank: int) -> int:
    """Starts the ranks (and restarts them, with --max-restarts) with the validated
    configuration in their argv; they parse nothing."""
    from ..launchers import facade
    from ..launchers.launch_plan import Target
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
