"""`scaletrain train --strategy auto`: the plan's choice (scaletrain/plan/choose.py) made in the
command's own process before any rank starts, then trained as if its flags had been given.
The ranks and the run's config.yaml get the chosen strategy and degrees, never "auto"."""

from __future__ import annotations

import argparse
from dataclasses import replace

from ..errors import UsageError
from ..train.config import TrainConfig

#: A choice's measurement: short, since the decision is a small part of a run.
PROBE = {"steps": 10, "warmup": 2, "min_seconds": 0.5, "probe_rounds": 2, "budget": 60.0, "max_error": 0.5}


def given_constraints(config: TrainConfig, world: int):
    """The degrees and options given beside --strategy auto: the choice keeps them; a set no
    configuration of `world` processes can keep is refused now, in one line."""
    from ..plan.constraints import Constraints, check_possible
    from ..workloads.meta import meta_model
    from ..workloads.model_config import workload_for

    constraints = Constraints.given(config.strategy_options)
    if constraints:
        check_possible(constraints, world, meta_model(workload_for(config)), config.batch_size)
    return constraints


def resolve_auto(config: TrainConfig, nproc: int) -> TrainConfig:
    """The configuration with the chosen strategy and options in place of auto, and the lines
    that say why (`auto_choice`)."""
    from ..devices import choose_device
    from ..plan.choose import choose
    from .plan_cmd import hosts_for, machine_from_args, measured_probes

    device = choose_device(config.device, 0)
    launch = config.launch
    world = nproc * (launch.nnodes or 1)
    probe_args = argparse.Namespace(
        **PROBE, workload=config.workload, model=config.model, dataset=config.dataset, batch_size=config.batch_size,
        seed=config.seed, device=config.device, backend=config.backend, max_other_load=config.max_other_load,
        hosts=launch.hosts, hostfile=launch.hostfile, nproc_per_node=launch.nproc_per_node, overlap=None,
        link_gbps=10.0, link_latency_us=20.0, device_memory_gb=None, world_sizes=None, microbatches=None,
        devices_per_process=None)
    # Across --hosts the choice is measured as `plan --choose --hosts` measures it: jobs across
    # them, the network between them timed; every slot of each host trains.
    hosts = hosts_for(probe_args, None)
    if hosts is None and (launch.nnodes or 1) > 1:
        # Every node's command would measure and choose on its own, and might choose apart.
        raise UsageError(f"--strategy auto with --nnodes {launch.nnodes}: each node would choose on its own; give the "
                         "machines with --hosts A:N,B:N (mpirun, one choice measured across them), or choose once with "
                         "`scaletrain plan --choose --hosts …` and pass its strategy and degrees to every node")
    if hosts is not None:
        world = hosts.world_size
    else:
        probe_args.nproc_per_node = nproc
    machine = machine_from_args(probe_args, device.type)
    constraints = given_constraints(config, world)  # refused here, before a second is measured
    probes = measured_probes(probe_args, config.workload if not config.model else f"{config.workload} + {config.model}",
                             world, machine, device.type, say=lambda text: print(text, flush=True), hosts=hosts,
                             what="--strategy auto's measurement")
    choice = choose(probes, world, config.batch_size, machine, constraints)
    if choice.chosen is None:
        raise UsageError(f"--strategy auto: {choice.lines()[0]}; give more processes (--nproc-per-node) or a smaller "
                         "--batch-size")
    return replace(config, strategy=choice.chosen.strategy, auto_choice=" ".join(choice.lines()),
                   strategy_options={**config.strategy_options, **choice.chosen.options})
