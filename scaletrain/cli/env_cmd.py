"""`scaletrain env`: what this process would be in a job, and what this machine offers."""

from __future__ import annotations

import argparse
import json
import os
import platform

NAME = "env"
HELP = "show the detected launcher, ranks and master, backends, devices and threads"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def gather() -> dict:
    import torch

    from ..version import __version__
    from ..process.backends import available_backends
    from ..process.devices import cpu_cores, threads_per_process
    from ..process.environment import detect

    env = detect(os.environ)
    cuda = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return {
        "scaletrain_version": __version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "hostname": platform.node(),
        "environment": env.as_dict(),
        "explanation": env.explain(),
        "backends": available_backends(),
        "default_backend": "nccl" if cuda else "gloo",
        "devices": {"cpu_cores": cpu_cores(), "cuda": cuda},
        "threads_per_process": threads_per_process(env.local_world_size),
        "network": network_facts(env.master_addr),
    }


def network_facts(master_addr: str) -> dict:
    """Which interface reaches the master, and why (what `scaletrain launch` would set)."""
    from ..process import netif
    from ..foundation.errors import UsageError

    try:
        facts = netif.choose(master_addr, os.environ).as_dict()
    except UsageError as exc:
        facts = {"master_addr": master_addr, "error": str(exc), "reasons": [str(exc)]}
    facts["interfaces"] = [f"{i.name} {i.address}/{i.prefixlen}" for i in netif.local_interfaces()]
    facts["hostname_note"] = netif.hostname_note()
    return facts


def run(args: argparse.Namespace) -> int:
    facts = gather()
    if args.json:
        print(json.dumps(facts, indent=2, sort_keys=True))
        return 0
    print(f"scaletrain {facts['scaletrain_version']}, torch {facts['torch_version']}, "
          f"Python {facts['python_version']} on {facts['hostname']}")
    print("detected:")
    for line in facts["explanation"]:
        print(f"  {line}")
    print("backends:")
    for name, why in facts["backends"].items():
        print(f"  {name:5} {why}")
    print(f"  default here: {facts['default_backend']}")
    devices = facts["devices"]
    print(f"devices: {devices['cpu_cores']} CPU core(s); "
          f"{len(devices['cuda'])} CUDA device(s){': ' + ', '.join(devices['cuda']) if devices['cuda'] else ''}")
    net = facts["network"]
    print(f"network: interfaces {', '.join(net['interfaces']) or 'none'}")
    for reason in net["reasons"]:
        print(f"  {reason}")
    if net["hostname_note"]:
        print(f"  note: {net['hostname_note']}")
    local = facts["environment"]["local_world_size"]
    print(f"threads per process: {facts['threads_per_process']} ({devices['cpu_cores']} core(s) ÷ {local} "
          f"local process(es))")
    return 0
