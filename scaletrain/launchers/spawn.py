"""The spawn launcher: N processes on this machine, children of this Python process
(multiprocessing's `spawn` start method, so it also works from a notebook). Each child gets
the variables torchrun would give it, then runs the program through the rank runner, in
its own process, so a rank behaves the same whoever started it.

This process is the parent of every rank, so it knows how each one ended: the first to end
badly is the cause (by its own record, or by the signal that killed it), the others get
STOP_GRACE_S to end by themselves, then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import replace
from typing import Callable, Optional

from ..defaults import MASTER_ADDR, STOP_GRACE_S
from ..errors import UsageError
from ..netif import Choice
from .base import Job, network_env
from .failures import signal_summary, write_record
from .interrupts import Interrupts
from .plan import ERROR_DIR_VAR, Command, Plan, rank_argv
from .preflight import check_interfaces, check_local_master, check_port_free, warn_if_oversubscribed
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
        return replace(req, launcher=self.name, nnodes=1, node_rank=0,
                       nproc_per_node=req.nproc_per_node or req.default_nproc,
                       master_addr=req.master_addr or MASTER_ADDR, master_port=req.master_port or PORT_AT_START)

    def plan(self, req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
        commands = []
        for rank, env in enumerate(spawn_environments(req.nproc_per_node, req.master_port, req.master_addr)):
            env.update(network_env(network))
            commands.append(Command(f"rank {rank} (a child process of this one)",
                                    tuple(rank_argv(req.target, req.timeout, req.python)), env))
        return Plan(self.name, tuple(commands), req.target, 1, req.nproc_per_node, node_rank=0,
                    join_timeout=req.timeout, in_process=True)

    def preflight(self, req: LaunchRequest) -> None:
        check_interfaces(req)
        check_local_master(req)
        warn_if_oversubscribed(req)
        if req.master_port != PORT_AT_START:
            check_port_free(req, req.master_addr, req.master_port)

    def execute(self, plan: Plan, job: Job) -> int:
        return run_children(plan, job, _run_rank_program)


LAUNCHER = SpawnLauncher()


def _run_rank_program(plan: Plan) -> None:
    """What each child does: the rank runner, in this process."""
    from .rank import finish, run_target

    rank, status = run_target(plan.target, plan.join_timeout)
    finish(rank, status)


def _child(body: Callable, plan: Plan, env: dict, error_dir: str) -> None:
    os.environ.update(env)
    os.environ[ERROR_DIR_VAR] = error_dir
    body(plan)


def _host_store(environments: list[dict[str, str]]):
    """When no port was asked for, this process hosts the rendezvous store itself on a port
    the OS picks as it binds (no gap in which another program could take it), and the
    ranks join it as clients, as torchrun's workers join their agent's store."""
    from torch.distributed import TCPStore

    store = TCPStore(environments[0]["MASTER_ADDR"], 0, len(environments), is_master=True,
                     wait_for_workers=False, use_libuv=True)
    for env in environments:
        env.update(MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True")
    return store


def _stop(processes: list, grace: float) -> None:
    """SIGTERM the live ones, wait `grace`, SIGKILL whatever is left; reap everything."""
    started = [p for p in processes if p.pid is not None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in started if p.is_alive()]
        for p in live:
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in live:
            p.join(max(0.0, deadline - time.monotonic()))
    for p in started:
        p.join()


def _wait_for_first_failure(processes: list, interrupts: Interrupts) -> Optional[int]:
    """Waits until every process has ended (None) or one ended badly (its index), or a
    signal was received (-1)."""
    from multiprocessing.connection import wait

    pending = {p.sentinel: i for i, p in enumerate(processes)}
    while pending:
        if interrupts.signum is not None:
            return -1
        for sentinel in wait(list(pending), timeout=0.5):
            index = pending.pop(sentinel)
            processes[index].join()
            if processes[index].exitcode != 0:
                return index
    return None


def run_children(plan: Plan, job: Job, body: Callable[[Plan], None]) -> int:
    """Runs `body(plan)` in one child per rank, with that rank's variables; returns the
    job's exit status (the first failing rank's)."""
    environments = [dict(command.env) for command in plan.commands]
    store = _host_store(environments) if environments[0]["MASTER_PORT"] == PORT_AT_START else None
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_child, args=(body, plan, env, job.error_dir), name=f"rank-{rank}")
                 for rank, env in enumerate(environments)]
    try:
        for p in processes:
            p.start()
        return _outcome(processes, job)
    finally:
        _stop(processes, STOP_GRACE_S)
        del store  # closes the rendezvous once every rank is done with it


def _outcome(processes: list, job: Job) -> int:
    failed = _wait_for_first_failure(processes, job.interrupts)
    if failed is None:
        return 0
    if failed == -1:
        return job.interrupts.status(1)
    code = processes[failed].exitcode
    if code < 0 and job.interrupts.signum is None:  # killed by a signal: it wrote nothing, so say it here
        write_record(job.error_dir, failed, signal_summary(code), "", pid=processes[failed].pid, killed=True)
    # The others get a grace period to end by themselves (their watchdogs name the
    # failure), then SIGTERM, then SIGKILL: only SIGKILL ends a stopped process.
    deadline = time.monotonic() + STOP_GRACE_S
    for p in processes:
        if job.interrupts.signum is not None:
            break
        p.join(max(0.0, deadline - time.monotonic()))
    return job.interrupts.status(code if code > 0 else 1)
