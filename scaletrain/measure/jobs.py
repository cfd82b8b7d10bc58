"""Running `scaletrain <argv>` (or another of its modules) as a job of N processes, on this machine or across several
(`Hosts`): how bench, plan and comm start the jobs they measure. The one place that knows
which launcher does it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional

from ..foundation.errors import UsageError


@dataclass(frozen=True)
class Hosts:
    """The machines a measured job of several processes spans, the one measuring first: Open
    MPI's `mpirun --host` starts the ranks there (ssh, or the agent Open MPI is told to use),
    as many on each. A one-process job (the reference) runs here."""
    hosts: tuple
    """((host, slots), ...) as --hosts or --hostfile list them."""
    flag: str = "--hosts"

    @property
    def slots(self) -> int:
        """Processes per host (every host the same: a mesh dimension is laid out per host)."""
        counts = {s or 1 for _, s in self.hosts}
        if len(counts) != 1:
            listed = ", ".join(f"{h}:{s or 1}" for h, s in self.hosts)
            raise UsageError(f"{self.flag} {listed}: every host needs the same number of processes "
                             f"(slots), e.g. {','.join(f'{h}:{min(counts)}' for h, _ in self.hosts)}")
        return counts.pop()

    @property
    def world_size(self) -> int:
        return self.slots * len(self.hosts)

    @property
    def names(self) -> str:
        return ", ".join(h for h, _ in self.hosts)


def hosts_from_args(args) -> Optional[Hosts]:
    """The --hosts / --hostfile of a measuring command, or None (everything on this machine)."""
    from ..launchers.request import parse_hosts, read_hostfile

    if getattr(args, "hosts", None) and getattr(args, "hostfile", None):
        raise UsageError("give either --hostfile or --hosts, not both")
    if getattr(args, "hostfile", None):
        listed = read_hostfile(args.hostfile)
        if not listed:
            raise UsageError(f"--hostfile {args.hostfile} lists no hosts; write one line per host: 'host slots=N'")
        hosts = Hosts(tuple(listed), f"--hostfile {args.hostfile}")
    elif getattr(args, "hosts", None):
        hosts = Hosts(tuple(parse_hosts(args.hosts)))
    else:
        return None
    if len(hosts.hosts) < 2:
        raise UsageError(f"{hosts.flag} lists one host; list two or more (this one first), e.g. a:1,b:1")
    hosts.slots  # noqa: B018 (raises the one line when the hosts' slots differ)
    return hosts


def check_answering(hosts: Optional[Hosts]) -> None:
    """Before anything is measured across them: each other host answers and runs scaletrain
    (launchers/host_check.py), else one line naming the first that does not."""
    from ..launchers.host_check import check_hosts

    if hosts is not None:
        check_hosts([h for h, _ in hosts.hosts], sys.executable, os.environ, (), hosts.flag)


def run_job(argv: list[str], nproc: int, hosts: Optional[Hosts] = None, module: str = "scaletrain") -> int:
    """Runs `python -m <module> <argv>` (by default `scaletrain <argv>`) as `nproc` ranks — here (spawn launcher), or across `hosts`
    (mpirun, `nproc ÷ hosts` on each) when a job of several processes is given them — and
    returns the job's exit status. A failing rank's traceback goes to stderr. A job stopped by
    Ctrl-C, SIGTERM or SIGHUP raises Stopped, for the command to say what it had measured."""
    from ..foundation.defaults import hang_timeout_s
    from ..launchers.facade import run, run_script
    from ..launchers.interrupts import STOP_STATUSES, Stopped
    from ..launchers.launch_plan import Target
    from ..launchers.request import LaunchRequest

    # A measurement's hang timeout (HANG_TIMEOUT_VAR, which its ranks inherit) bounds start-up too.
    timeout = hang_timeout_s()
    if hosts is None or nproc == 1:
        code = run_script("", *argv, nproc=nproc, module=module, announce=False, timeout=timeout)
    else:
        per_host = max(1, nproc // len(hosts.hosts))
        request = LaunchRequest(Target(module=module, args=tuple(argv)), launcher="mpirun", timeout=timeout,
                                nproc_per_node=per_host, hosts=tuple((h, per_host) for h, _ in hosts.hosts))
        code = run(request.with_host_facts(), announce=False)
    if code in STOP_STATUSES:
        raise Stopped(code - 128)
    return code
