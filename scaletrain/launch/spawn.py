"""The spawn launcher: N processes on this machine, started by torch.multiprocessing from
one Python process. Each child gets the same environment variables torchrun would give it
and then runs the same command line, so a rank behaves the same whoever started it."""

from __future__ import annotations

import os
import sys

import torch.multiprocessing as mp

from .ports import free_port

STOP_GRACE_S = 3.0


def spawn_environments(nproc: int, master_port: int, master_addr: str = "127.0.0.1") -> list[dict[str, str]]:
    """The variables of each local rank: torch's env:// convention, one node."""
    return [{
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
        "SCALETRAIN_LAUNCHER": "spawn",
    } for rank in range(nproc)]


def _child(index: int, argv: list[str], environments: list[dict[str, str]]) -> None:
    os.environ.update(environments[index])
    from ..cli import main

    code = main(argv)
    if code:
        sys.exit(code)


def spawn(argv: list[str], nproc: int) -> int:
    """Runs `scaletrain <argv>` as `nproc` local ranks; returns the job's exit status. The
    first rank to fail is reported with its traceback, and the others are stopped."""
    environments = spawn_environments(nproc, free_port())
    context = mp.start_processes(_child, args=(argv, environments), nprocs=nproc, join=False,
                                 start_method="spawn")
    try:
        # When one rank fails, the others get STOP_GRACE_S to end by themselves (their
        # watchdogs name the failure), then SIGTERM, then SIGKILL: only SIGKILL ends a
        # stopped (SIGSTOP) process, and nothing may be left behind.
        while not context.join(grace_period=STOP_GRACE_S):
            pass
    except mp.ProcessRaisedException as exc:
        print(f"scaletrain: rank {exc.error_index} failed (the other ranks were stopped):\n{exc}",
              file=sys.stderr, flush=True)
        return 1
    except mp.ProcessExitedException as exc:
        print(f"scaletrain: rank {exc.error_index} exited with status {exc.exit_code} "
              f"(the other ranks were stopped)", file=sys.stderr, flush=True)
        return exc.exit_code if exc.exit_code and exc.exit_code > 0 else 1
    except KeyboardInterrupt:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
        return 130
    return 0
