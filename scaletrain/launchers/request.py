"""What the user asked for (a LaunchRequest), plus the facts about this host that the plan
needs, gathered once so that building a plan stays pure and testable."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Optional

from ..foundation.defaults import CONNECT_TIMEOUT_S, HANG_TIMEOUT_S, MASTER_PORT as DEFAULT_PORT
from ..foundation.errors import UsageError
from .launch_plan import Target

LAUNCHERS = ("auto", "spawn", "torchrun", "mpirun", "srun")


@dataclass(frozen=True)
class SlurmResources:
    """What a generated batch script asks Slurm for (None: left to the cluster's defaults)."""

    gpus_per_node: Optional[int] = None
    cpus_per_task: Optional[int] = None
    time_s: Optional[float] = None
    partition: Optional[str] = None


@dataclass(frozen=True)
class LaunchRequest:
    target: Target
    launcher: str = "auto"
    nproc_per_node: Optional[int] = None
    default_nproc: int = 1            # the command's default when neither flag nor hostfile says
    nnodes: Optional[int] = None
    node_rank: Optional[int] = None
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    rdzv_endpoint: Optional[str] = None
    rdzv_id: str = "scaletrain"
    hosts: tuple = ()                 # mpirun: ((host, slots or None), ...)
    hostfile: Optional[str] = None    # where `hosts` came from, for messages
    sbatch: Optional[Path] = None
    slurm: SlurmResources = SlurmResources()
    device: Optional[str] = None      # the job's device when known (`train --device`): cuda asks Slurm for GPUs
    connect_timeout: float = CONNECT_TIMEOUT_S
    timeout: float = HANG_TIMEOUT_S   # start-up: a rank that does not join within this is named
    launcher_args: tuple = ()         # passed to torchrun, mpirun or srun as they are
    # Facts about this host (filled by `with_host_facts`; set directly in tests).
    python: str = sys.executable
    is_root: bool = False
    cpu_cores: int = 1
    environ: Mapping = field(default_factory=dict)
    cwd: str = "."

    @property
    def in_slurm_allocation(self) -> bool:
        return bool(self.environ.get("SLURM_JOB_ID")) and not self.environ.get("SLURM_STEP_ID")

    def with_host_facts(self) -> "LaunchRequest":
        from ..process.cores import cpu_cores

        return replace(self, python=sys.executable, is_root=os.geteuid() == 0, cpu_cores=cpu_cores(),
                       environ=dict(os.environ), cwd=os.getcwd())


def parse_hostfile(text: str, name: str = "hostfile") -> list[tuple[str, Optional[int]]]:
    """Open MPI's hostfile: `host [slots=N] [max_slots=M]` per line, `#` comments."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host, *rest = line.split()
        slots = None
        for word in rest:
            key, _, value = word.partition("=")
            if key in ("slots", "max_slots", "max-slots") and not value.isdigit():
                raise UsageError(f"--hostfile {name} line {number}: {word!r} is not a count; write e.g. 'slots=2'")
            if key == "slots":
                slots = int(value)
        hosts.append((host, slots))
    return hosts


def read_hostfile(path: str) -> list[tuple[str, Optional[int]]]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"--hostfile {path} cannot be read ({exc.strerror}); give the path of a hostfile") from None
    return parse_hostfile(text, path)


def parse_hosts(text: str) -> list[tuple[str, Optional[int]]]:
    """`a:2,b:2` or `a,b` (Open MPI's --host syntax)."""
    hosts = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        host, _, slots = item.partition(":")
        if slots and not slots.isdigit():
            raise UsageError(f"--hosts {text}: {item!r} has no slot count after ':'; write host:N, e.g. {host}:2")
        hosts.append((host, int(slots) if slots else None))
    if not hosts:
        raise UsageError("--hosts is empty; list hosts like a:2,b:2")
    return hosts


def split_endpoint(endpoint: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep:
        return endpoint, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--rdzv-endpoint {endpoint}: {port!r} is not a port; write host:port, e.g. {host}:29400")
    return host.strip("[]"), int(port)


def rendezvous(req: LaunchRequest) -> tuple[Optional[str], Optional[int]]:
    """The address every rank must reach, and its port: torchrun's rendezvous endpoint,
    else the master (None where not known yet)."""
    if req.rdzv_endpoint:
        return split_endpoint(req.rdzv_endpoint)
    return req.master_addr, req.master_port
