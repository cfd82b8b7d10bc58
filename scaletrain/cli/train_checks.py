"""What `scaletrain train` checks before any process starts, so that mistakes cost seconds:
the strategy on this many processes (its split, stages and micro-batches, on a model built on
the meta device: no memory, next to no time; the ranks build the real one, once), the device
and backend, the trackers and their servers, the workload's factories, a resume's
checkpoint, the output folder. The data is checked by the ranks, before their first step."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from ..checkpoint.compat import resume_facts
from ..process import netif
from ..process.backends import choose_backend
from ..process.devices import choose_device
from ..process.environment import DistEnv
from ..strategies import get_strategy
from ..track import check_reachable, check_trackers
from ..train.config import TrainConfig
from ..workloads.factories import load_factory
from ..workloads.meta import meta_model
from ..workloads.model_config import workload_for
from .outdir import check_out, default_out, refuse_if_held
from .resume_checks import check_fault_flags, check_resume, out_may_hold_files


def node_rank_of(config: TrainConfig, env: DistEnv) -> int:
    """This node's number: node 0 owns the output folder (rank 0 writes it)."""
    return config.launch.node_rank if config.launch.node_rank is not None else (env.node_rank if env.per_node else 0)


def checked(config: TrainConfig, nproc: int, env: DistEnv) -> TrainConfig:
    """The configuration, checked, its defaults resolved (epochs, learning rate, the output
    folder; trackers whose server does not answer left out where --if-tracker-unreachable skip
    says so); notes on what a resume will load go to stderr."""
    config, strategy, model = validate(config, nproc)
    config = config.with_workload_defaults()
    check_fault_flags(config, env)
    config = replace(config, out=Path(config.out or default_out(config.strategy, nproc)).expanduser().absolute())
    # Other nodes must not refuse node 0's folder, and --resume auto continues the run already in it.
    node_rank, launch = node_rank_of(config, env), config.launch
    if not (node_rank or launch.rdzv_endpoint or launch.dry_run):
        refuse_if_held(config.out)  # first: a live run's folder is refused for that, whatever it holds
    world_size = nproc * (launch.nnodes or 1)
    facts = {"grad_accum": strategy.grad_accum, "batch_size": config.batch_size, "world_size": world_size,
             "data_parallel_size": strategy.dims(world_size).dp_size,
             "strategy": strategy.name, **resume_facts(workload_for(config))}  # what a resume must agree with
    for note in check_resume(config, model, facts):
        print(f"scaletrain: note: {note}", file=sys.stderr)
    if not node_rank and not out_may_hold_files(config):
        check_out(config.out)
    return config


def validate(config: TrainConfig, nproc: int):
    """(the configuration, the strategy, the model on the meta device it was checked with). A
    batch script written for other machines is not checked against this host's devices."""
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
    workload.check_context_parallel(strategy.dims(nproc).cp)  # sequences it can split
    return config, strategy, model

