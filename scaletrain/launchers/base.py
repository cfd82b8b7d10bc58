"""The protocol every launcher implements, one module each (spawn.py, torchrun.py,
mpirun.py, srun.py). Nothing outside those modules knows a launcher's particulars: the
façade (facade.py) only calls these four steps, in this order.

    resolve(request)        -> request   fill in what was left out: process counts, master
                                         address and port (may look at this host)
    plan(request, network)  -> Plan      the exact argv and environment of each node (pure)
    preflight(request)                   the checks just before running, each of which would
                                         otherwise be a hang or a buried error (UsageError)
    execute(plan, job)      -> int       run this node's part, stop what is left, return the
                                         job's exit status
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from ..process.netif import Choice
from .interrupts import Interrupts
from .launch_plan import Plan
from .request import LaunchRequest


@dataclass(frozen=True)
class Job:
    """What an executor gets besides the plan: where ranks leave their failure records,
    and the signals received while it runs."""

    error_dir: str
    interrupts: Interrupts


class Launcher(Protocol):
    name: str
    #: Whether its plans name the network interface chosen on this host (srun: each task
    #: chooses on its own node, in the rank runner).
    chooses_network: bool

    def resolve(self, req: LaunchRequest) -> LaunchRequest: ...

    def plan(self, req: LaunchRequest, network: Optional[Choice] = None) -> Plan: ...

    def preflight(self, req: LaunchRequest) -> None: ...

    def execute(self, plan: Plan, job: Job) -> int: ...


def network_env(network: Optional[Choice]) -> dict:
    return dict(network.set_vars) if network else {}
