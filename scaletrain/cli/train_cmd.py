"""`scaletrain train`: train a workload with a strategy on one or many processes.

Not launched by anything: validate everything, create the output folder, then start the
processes (spawn). Started by a launcher (torchrun, mpirun, srun, spawn): be one rank.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import netif
from ..backends import choose_backend
from ..devices import choose_device, cpu_cores
from ..environment import detect
from ..strategies import REGISTRY, get_strategy, strategy_names
from ..train.config import TrainConfig
from ..workloads import BUILTIN, get_workload
from .launch_options import add_launch_arguments, launch_request, launch_requested, strip_launch_args
from .fault_options import (add_fault_arguments, check_fault_flags, describe_resume, fault_config,
                            out_may_hold_files, restart_argv)
from .outdir import check_out, create_out, default_out
from .parsing import positive_float, positive_int
from .strategy_options import add_strategy_arguments, strategy_options_from_args
from .perf_options import add_perf_arguments, apply_perf_options

NAME = "train"
HELP = "train a model (the built-in digits CNN by default) with a strategy on N processes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", default="ddp", choices=strategy_names(), metavar="NAME",
                   help=f"how to spread the work: {', '.join(f'{n} ({c.help})' for n, c in REGISTRY.items())}")
    p.add_argument("--workload", default="digits-cnn", choices=list(BUILTIN), metavar="NAME",
                   help="built-in workload: " + "; ".join(f"{w.name}: {w.description}" for w in BUILTIN.values()))
    p.add_argument("--model", metavar="MODULE:FUNCTION", help="your model factory, returning a torch.nn.Module")
    p.add_argument("--dataset", metavar="MODULE:FUNCTION",
                   help="your dataset factory, returning a Dataset (split by --seed) or a (train, held_out) pair")
    p.add_argument("--epochs", type=positive_int, help="passes over the training data (default: the workload's)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="samples per process per step (default 32)")
    p.add_argument("--eval-batch-size", type=positive_int, default=256, help="samples per process per evaluation step")
    p.add_argument("--lr", type=positive_float, help="learning rate (default: the workload's)")
    p.add_argument("--seed", type=int, default=0, help="seeds weights, held-out split and shuffling (default 0)")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl", "mpi", "ccl"], default="auto",
                   help="communication backend (default: nccl on CUDA, gloo on CPU)")
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")
    p.add_argument("--threads", type=positive_int, help="CPU threads per process (default: cores ÷ processes)")
    p.add_argument("--out", type=Path, help="output folder (default: a new folder under runs/)")
    add_launch_arguments(p, "one per GPU, else one per CPU core; 1 for one-process strategies")
    add_fault_arguments(p)
    add_strategy_arguments(p)
    add_perf_arguments(p)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    config = TrainConfig(strategy=args.strategy, workload=args.workload, model=args.model, dataset=args.dataset,
                         epochs=args.epochs, batch_size=args.batch_size, eval_batch_size=args.eval_batch_size,
                         lr=args.lr, seed=args.seed, backend=None if args.backend == "auto" else args.backend,
                         device=None if args.device == "auto" else args.device, threads=args.threads,
                         strategy_options=strategy_options_from_args(args), **fault_config(args))
    return apply_perf_options(args, config)


def default_nproc(strategy: str) -> int:
    import torch

    if not REGISTRY[strategy].multi_process:
        return 1
    return torch.cuda.device_count() or cpu_cores()


def validate(config: TrainConfig, nproc: int) -> None:
    """Everything that can be checked before a process starts, so mistakes cost seconds."""
    netif.check_interfaces(os.environ)  # GLOO_SOCKET_IFNAME=eth99 would fail deep inside start-up
    strategy = get_strategy(config.strategy, **config.strategy_options)
    strategy.check_world_size(nproc)
    device = choose_device(config.device, 0)
    choose_backend(config.backend, device.type)
    workload = get_workload(config.workload, config.model, config.dataset)
    strategy.preflight(nproc, workload.build_model(), config.batch_size)  # splits, stages, micro-batches
    if config.dataset:
        workload.build_datasets(config.seed)


def run(args: argparse.Namespace) -> int:
    from ..launchers import facade
    from ..launchers.plan import Target
    from ..launchers.restart import run_with_restarts
    from ..train.loop import train

    env = detect(os.environ)
    config = config_from_args(args)
    # A process that stands for a whole node (a Kubernetes pod) starts the node's ranks when
    # asked for several; otherwise a launched process is one rank of someone else's job.
    node_agent = env.per_node and (args.nproc_per_node or 1) > 1
    if env.launched and not node_agent and args.dry_run:  # a dry run never trains, whoever started it
        print(f"dry run: rank {env.rank} of {env.world_size} (started by {env.launcher}) would train "
              f"--strategy {config.strategy} on {config.workload}; nothing was started")
        return 0
    if env.launched and not node_agent:
        if args.nproc_per_node and args.nproc_per_node != env.local_world_size:
            print(f"scaletrain: note: --nproc-per-node {args.nproc_per_node} ignored: the {env.launcher} launcher "
                  f"started {env.local_world_size} process(es) on this node", file=sys.stderr)
        check_fault_flags(args, env, args.out)
        train(config, args.out or default_out(config.strategy, env.world_size))
        return 0
    nproc = args.nproc_per_node or default_nproc(config.strategy)
    validate(config, nproc)
    check_fault_flags(args, env, args.out)
    out = Path(args.out or default_out(config.strategy, nproc)).expanduser().absolute()
    # Node 0 owns the output folder (rank 0 writes it); other nodes must not refuse it, and
    # --resume auto continues the run already in it.
    node_rank = args.node_rank if args.node_rank is not None else (env.node_rank if node_agent else 0)
    if not node_rank and not out_may_hold_files(args, out):
        check_out(out)
    if nproc == 1 and not launch_requested(args) and not args.max_restarts:
        create_out(out)
        train(config, out)
        return 0
    train_argv = ["train", *strip_launch_args(args.argv[1:], also=("--out",)), "--out", str(out)]
    prepare = (lambda: create_out(out)) if not node_rank else None

    def attempt(number: int) -> int:
        argv = restart_argv(train_argv, out) if number else train_argv
        request = launch_request(args, Target(module="scaletrain", args=tuple(argv)), nproc, device=args.device)
        return facade.run(request, args.dry_run, prepare if number == 0 else None)

    return run_with_restarts(attempt, 0 if args.dry_run else args.max_restarts, lambda: describe_resume(out))
