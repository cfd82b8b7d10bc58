"""`scaletrain train --strategy auto`: the plan's choice (scaletrain/plan/choose.py) made in the
command's own process before any rank starts, then trained as if its flags had been given.
The ranks and the run's config.yaml get the chosen strategy and degrees, never "auto"."""

from __future__ import annotations

import argparse

from ..errors import UsageError

#: A choice's measurement: short, since the decision is a small part of a run.
PROBE = {"steps": 10, "warmup": 2, "min_seconds": 0.5, "probe_rounds": 2, "budget": 60.0, "max_error": 0.5}


def resolve_auto(args: argparse.Namespace, nproc: int) -> list[str]:
    """Sets `args.strategy` and the chosen options on `args`; returns the lines that say why."""
    from ..devices import choose_device
    from ..plan.choose import choose
    from .plan_cmd import hosts_for, machine_from_args, measured_probes

    device = choose_device(None if args.device == "auto" else args.device, 0)
    world = nproc * (args.nnodes or 1)
    probe_args = argparse.Namespace(**{**vars(args), **PROBE, "overlap": None, "link_gbps": 10.0,
                                       "link_latency_us": 20.0, "device_memory_gb": getattr(args, "device_memory_gb",
                                                                                         None),
                                       "world_sizes": None, "microbatches": None, "devices_per_process": None})
    # Across --hosts the choice is measured as `plan --choose --hosts` measures it: jobs across
    # them, the network between them timed; every slot of each host trains.
    hosts = hosts_for(probe_args, None)
    if hosts is None and (args.nnodes or 1) > 1:
        # Every node's command would measure and choose on its own, and might choose apart.
        raise UsageError(f"--strategy auto with --nnodes {args.nnodes}: each node would choose on its own; give the "
                         "machines with --hosts A:N,B:N (mpirun, one choice measured across them), or choose once with "
                         "`scaletrain plan --choose --hosts …` and pass its strategy and degrees to every node")
    if hosts is not None:
        world = hosts.world_size
    else:
        probe_args.nproc_per_node = nproc
    machine = machine_from_args(probe_args, device.type)
    probes = measured_probes(probe_args, args.workload if not args.model else f"{args.workload} + {args.model}",
                             world, machine, device.type, say=lambda text: print(text, flush=True), hosts=hosts)
    choice = choose(probes, world, args.batch_size, machine)
    if choice.chosen is None:
        raise UsageError(f"--strategy auto: {choice.lines()[0]}; give more processes (--nproc-per-node) or a smaller "
                         "--batch-size")
    args.strategy = choice.chosen.strategy
    for name, value in choice.chosen.options.items():
        setattr(args, name, value)
    return choice.lines()
