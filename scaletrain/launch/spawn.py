"""The spawn launcher: N processes on this machine, started by torch.multiprocessing from
one Python process (so it also works from a notebook: `run_script("train.py", nproc=2)`).
Each child gets the variables torchrun would give it, then runs the program through the
rank runner, in-process, so a rank behaves the same whoever started it."""

from __future__ import annotations

import os
import sys
from typing import Optional

import torch.multiprocessing as mp

from ..defaults import STOP_GRACE_S
from .plan import ERROR_DIR_VAR, Plan, Target



# Shown by --dry-run; the spawn executor binds the port when the job starts.
PORT_AT_START = "<a free port, bound when the job starts>"


def spawn_environments(nproc: int, master_port, master_addr: str = "127.0.0.1") -> list[dict[str, str]]:
    """The variables of each local rank: torch's env:// convention, one node."""
    return [{
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
        "SCALETRAIN_LAUNCHER": "spawn",
    } for rank in range(nproc)]


def _child(index: int, environments: list[dict[str, str]], target: Target, error_dir: str) -> None:
    from .rank import run_target

    os.environ.update(environments[index])
    os.environ[ERROR_DIR_VAR] = error_dir
    code = run_target(target)
    if code:
        sys.exit(code)


def _store_for_children(environments: list[dict[str, str]]):
    """When no port was asked for, this process hosts the rendezvous store itself on a port
    the OS picks as it binds (no gap in which another program could take it), and the
    ranks join it as clients, as torchrun's workers join their agent's store."""
    from torch.distributed import TCPStore

    store = TCPStore(environments[0]["MASTER_ADDR"], 0, len(environments), is_master=True,
                     wait_for_workers=False, use_libuv=True)
    for env in environments:
        env.update(MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True")
    return store


def run_in_children(plan: Plan, error_dir: str) -> int:
    """Runs the plan's ranks as children of this process; returns the job's exit status.
    When one fails, torch.multiprocessing stops the others."""
    environments = [dict(command.env) for command in plan.commands]
    store = _store_for_children(environments) if environments[0]["MASTER_PORT"] == PORT_AT_START else None
    context = mp.start_processes(_child, args=(environments, plan.target, error_dir), nprocs=len(environments),
                                 join=False, start_method="spawn")
    try:
        # When one rank fails, the others get STOP_GRACE_S to end by themselves (their
        # watchdogs name the failure), then SIGTERM, then SIGKILL: only SIGKILL ends a
        # stopped (SIGSTOP) process, and nothing may be left behind.
        while not context.join(grace_period=STOP_GRACE_S):
            pass
    except mp.ProcessRaisedException:  # the rank runner records every exception itself
        return 1
    except mp.ProcessExitedException as exc:
        return exc.exit_code if exc.exit_code and exc.exit_code > 0 else 1
    except KeyboardInterrupt:
        return 130
    finally:
        del store  # closes the rendezvous once every rank is done with it
        for process in context.processes:
            if process.is_alive():
                process.terminate()
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
    return 0


def run_script(script: str, *args: str, nproc: int = 2, module: Optional[str] = None) -> int:
    """Runs `script` (or `module`, like `python -m`) on `nproc` local ranks; from Python or a
    notebook. Returns the exit status; the first failure's traceback goes to stderr."""
    from .executor import execute
    from .planner import plan_for
    from .request import LaunchRequest

    target = Target(module=module, args=args) if module else Target(script=script, args=args)
    request = LaunchRequest(target, launcher="spawn", nproc_per_node=nproc).with_host_facts()
    _request, plan = plan_for(request)
    return execute(plan)


def spawn(argv: list[str], nproc: int) -> int:
    """Runs `scaletrain <argv>` as `nproc` local ranks; returns the job's exit status."""
    return run_script("", *argv, nproc=nproc, module="scaletrain")
