"""The spawn launcher: N processes on this machine, children of this Python process. Each
rank is a program of its own, the rank runner (`python -m scaletrain.launchers.rank ...
script.py`) with the variables torchrun would give it: exactly the command `--dry-run`
shows. So to the user's program a rank looks like a process torchrun started (the
platform's default multiprocessing start method, the program as `__main__`), and a script
without `if __name__ == "__main__":` runs its DataLoader workers as it does under torchrun.
Only `scaletrain.launch(fn)`, whose function travels by pickle, starts its ranks through
multiprocessing (then resetting the start method to the platform's default).

The ranks stay in this process's process group, so Ctrl-C at the terminal reaches them all
at once, as it reaches this process. This process is the parent of every rank, so it knows
how each one ended: the first to end badly is the cause (by its own record, or by the
signal that killed it), the others get STOP_GRACE_S to end by themselves, then SIGTERM,
then SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import time
from dataclasses import replace
from typing import Callable, Optional, Protocol

from ..foundation.defaults import MASTER_ADDR, STOP_GRACE_S
from ..foundation.errors import UsageError
from ..process.netif import Choice
from ..process.startup_timeline import mark
from . import warm
from .base import Job, network_env
from .failures import signal_summary, write_record
from .interrupts import Interrupts
from .launch_plan import Command, Plan, execution_env, rank_argv
from .preflight import check_interfaces, check_local_master, check_port_free, warn_if_oversubscribed
from .processes import descendants, stop_all
from .request import LaunchRequest

# Shown by --dry-run; the executor binds the port when the job starts.
PORT_AT_START = "<a free port, bound when the job starts>"


def spawn_environments(nproc: int, master_port, master_addr: str = MASTER_ADDR) -> list[dict[str, str]]:
    """The variables of each local rank: torch's env:// convention, one node."""
    return [{
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
        "SCALETRAIN_LAUNCHER": "spawn",
    } for rank in range(nproc)]


class SpawnLauncher:
    name = "spawn"
    chooses_network = True

    def resolve(self, req: LaunchRequest) -> LaunchRequest:
        if (req.nnodes or 1) > 1 or req.rdzv_endpoint or req.hosts:
            raise UsageError("spawn starts processes on this machine only; for several nodes use --launcher torchrun "
                             "(run on each node) or --launcher mpirun --hostfile FILE")
        if req.launcher_args:
            raise UsageError("--launcher-args passes arguments to torchrun, mpirun or srun; spawn is no separate "
                             "program: choose one of those launchers or leave --launcher-args out")
        req = replace(req, launcher=self.name, nnodes=1, node_rank=0,
                      nproc_per_node=req.nproc_per_node or req.default_nproc,
                      master_addr=req.master_addr or MASTER_ADDR, master_port=req.master_port or PORT_AT_START)
        check_local_master(req)  # here, not in preflight: --dry-run must not show a plan that cannot run
        return req

    def plan(self, req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
        commands = []
        for rank, env in enumerate(spawn_environments(req.nproc_per_node, req.master_port, req.master_addr)):
            env.update(network_env(network))
            if "OMP_NUM_THREADS" not in req.environ:
                # As torchrun does, so that no rank's thread pool starts with every core; here
                # the threads scaletrain gives a process (the cores shared among the ranks).
                env["OMP_NUM_THREADS"] = str(max(1, req.cpu_cores // req.nproc_per_node))
            commands.append(Command(f"rank {rank} (a child process of this one)",
                                    tuple(rank_argv(req.target, req.timeout, req.python)), env))
        return Plan(self.name, tuple(commands), req.target, 1, req.nproc_per_node, node_rank=0,
                    join_timeout=req.timeout)

    def preflight(self, req: LaunchRequest) -> None:
        check_interfaces(req)
        warn_if_oversubscribed(req)
        if req.master_port != PORT_AT_START:
            check_port_free(req, req.master_addr, req.master_port)

    def execute(self, plan: Plan, job: Job) -> int:
        argvs = [command.argv for command in plan.commands]
        return run_children(plan, job, lambda rank, env: RankCommand(argvs[rank], env))


LAUNCHER = SpawnLauncher()


class RankProcess(Protocol):
    """A started rank: a program (subprocess) or a function (multiprocessing)."""

    pid: Optional[int]

    def exit_status(self) -> Optional[int]:
        """None while it runs; then its exit status (-N: killed by signal N)."""

    def wait(self, timeout: Optional[float]) -> None:
        """Waits up to `timeout` seconds (None: for ever) for it to end, and reaps it."""


class RankCommand:
    """A rank started as a program of its own, with this process's environment plus `env`
    (in a warm interpreter when the command started some: warm.py)."""

    def __init__(self, argv, env: dict):
        environ = {**os.environ, **env}
        self.popen = warm.take(argv, environ) or subprocess.Popen(list(argv), env=environ)
        self.pid = self.popen.pid

    def exit_status(self) -> Optional[int]:
        return self.popen.poll()

    def wait(self, timeout: Optional[float]) -> None:
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass


class RankFunction:
    """A rank started by multiprocessing's `spawn`, running `body(plan)` (scaletrain.launch(fn))."""

    def __init__(self, body: Callable[[Plan], None], plan: Plan, env: dict):
        self.process = multiprocessing.get_context("spawn").Process(target=_function_child, args=(body, plan, env),
                                                                   name=f"rank-{env['RANK']}")
        self.process.start()
        self.pid = self.process.pid

    def exit_status(self) -> Optional[int]:
        return self.process.exitcode

    def wait(self, timeout: Optional[float]) -> None:
        self.process.join(timeout)


def _function_child(body: Callable[[Plan], None], plan: Plan, env: dict) -> None:
    os.environ.update(env)
    multiprocessing.set_start_method(None, force=True)  # the platform's default again, as under torchrun
    body(plan)


class _Rendezvous:
    """When no port was asked for, this process hosts the rendezvous store on a port the OS
    picks as it binds (no gap in which another program could take it), and the ranks join
    it as clients, as torchrun's workers join their agent's store. The socket is bound
    before the ranks start and handed to the store afterwards, so that the ranks start
    while this process is still importing torch (they queue on the socket until then)."""

    def __init__(self, address: str):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.socket = socket.create_server((address, 0), family=family, backlog=1024)
        self.port = self.socket.getsockname()[1]
        self.store = None

    def serve(self, world_size: int) -> None:
        from torch.distributed import TCPStore

        self.store = TCPStore(self.socket.getsockname()[0], self.port, world_size, is_master=True,
                              wait_for_workers=False, master_listen_fd=self.socket.fileno(), use_libuv=True)
        self.socket.detach()  # the store owns the socket now, and closes it

    def close(self) -> None:
        self.store = None  # closes the rendezvous once every rank is done with it
        self.socket.close()


def _stop(processes: list[RankProcess], grace: float) -> None:
    """SIGTERM the live ones, wait `grace`, SIGKILL whatever is left; reap everything."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in processes if p.exit_status() is None]
        for p in live:
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in live:
            p.wait(max(0.0, deadline - time.monotonic()))
    for p in processes:
        p.wait(None)


#: How often the ranks' states are looked at while they run.
POLL_S = 0.05


def _wait_for_first_failure(processes: list[RankProcess], interrupts: Interrupts,
                            below: Optional[set] = None) -> Optional[int]:
    """Waits until every process has ended (None) or one ended badly (its index), or a
    signal was received (-1). `below` collects the processes seen below the ranks."""
    pending = list(range(len(processes)))
    next_scan = 0.0
    while pending:
        if interrupts.signum is not None:
            return -1
        if below is not None and time.monotonic() > next_scan:
            for p in processes:  # remembered: a rank's orphans lose their parent link
                below.update(descendants(p.pid))
            next_scan = time.monotonic() + 1.0
        for index in list(pending):
            status = processes[index].exit_status()
            if status is None:
                continue
            pending.remove(index)
            if status != 0:
                return index
        if pending:
            time.sleep(POLL_S)
    return None


def run_children(plan: Plan, job: Job, start: Callable[[int, dict], RankProcess]) -> int:
    """Starts one process per rank with `start(rank, that rank's variables)`; returns the
    job's exit status (the first failing rank's)."""
    environments = [dict(command.env) for command in plan.commands]
    rendezvous = _Rendezvous(environments[0]["MASTER_ADDR"]) if environments[0]["MASTER_PORT"] == PORT_AT_START \
        else None
    for env in environments:
        env.update(execution_env(job.error_dir))
        if rendezvous is not None:
            env.update(MASTER_PORT=str(rendezvous.port), TORCHELASTIC_USE_AGENT_STORE="True")
    processes: list[RankProcess] = []
    below: set = set()  # every process seen below a rank: it does not outlive the job
    try:
        for rank, env in enumerate(environments):
            processes.append(start(rank, env))
        mark("command: ranks started")
        if rendezvous is not None:
            rendezvous.serve(len(environments))
            mark("command: rendezvous served")
        return _outcome(processes, job, below)
    finally:
        _stop(processes, STOP_GRACE_S)
        stop_all(below)
        if rendezvous is not None:
            rendezvous.close()


def _outcome(processes: list[RankProcess], job: Job, below: set) -> int:
    failed = _wait_for_first_failure(processes, job.interrupts, below)
    if failed is None:
        return 0
    if failed == -1:
        return job.interrupts.status(1)
    code = processes[failed].exit_status()
    if code < 0 and job.interrupts.signum is None:  # killed by a signal: it wrote nothing, so say it here
        write_record(job.error_dir, failed, signal_summary(code), "", pid=processes[failed].pid, killed=True)
    # The others get a grace period to end by themselves (their watchdogs name the
    # failure), then SIGTERM, then SIGKILL: only SIGKILL ends a stopped process.
    deadline = time.monotonic() + STOP_GRACE_S
    for p in processes:
        if job.interrupts.signum is not None:
            break
        p.wait(max(0.0, deadline - time.monotonic()))
    return job.interrupts.status(code if code > 0 else 1)
