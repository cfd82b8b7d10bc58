"""The rank runner: `python -m scaletrain.launch.rank [-m module | script.py] [args...]`.

Every launcher starts the user's program through this, so that the same program works
under spawn, torchrun, mpirun and srun without a line about launchers in it:

1. it detects who started it and fills in torch's env:// variables (RANK, WORLD_SIZE,
   LOCAL_RANK, MASTER_ADDR, ...) from OMPI_COMM_WORLD_* or SLURM_*, so a plain
   `dist.init_process_group("gloo")` works under mpirun and srun too;
2. it names the network interface that reaches the master (GLOO_SOCKET_IFNAME, ...) on
   *this* host, unless the user did;
3. it runs the program as `__main__` (runpy), and if it fails writes the traceback, rank and
   host where the launcher reads them (and torchrun's error file), so the launcher can show
   the first failure first.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Optional

from ..environment import detect
from ..errors import UsageError
from .failures import user_traceback, write_record
from .plan import ERROR_DIR_VAR, Target

ENV_VARS_FROM_DETECTION = {
    "RANK": "rank", "WORLD_SIZE": "world_size", "LOCAL_RANK": "local_rank", "LOCAL_WORLD_SIZE": "local_world_size",
    "GROUP_RANK": "node_rank", "GROUP_WORLD_SIZE": "nnodes", "MASTER_ADDR": "master_addr", "MASTER_PORT": "master_port",
}


def prepare_environment(environ) -> int:
    """Steps 1 and 2 above, in place. Returns this process's rank."""
    from .. import netif

    env = detect(environ)
    if env.launched and not environ.get("RANK"):
        values = env.as_dict()
        for var, key in ENV_VARS_FROM_DETECTION.items():
            environ.setdefault(var, str(values[key]))
        environ.setdefault("SCALETRAIN_LAUNCHER", env.launcher)  # detection keeps naming the real launcher
    if env.distributed:
        netif.apply(env.master_addr, environ)
    return env.rank


def parse_target(argv: list[str]) -> Target:
    if not argv or argv[0] in ("-h", "--help"):
        raise UsageError("usage: python -m scaletrain.launch.rank [-m module | script.py] [args...]")
    if argv[0] == "-m":
        if len(argv) < 2:
            raise UsageError("-m needs a module name, e.g. -m scaletrain train")
        return Target(module=argv[1], args=tuple(argv[2:]))
    return Target(script=argv[0], args=tuple(argv[1:]))


def _run(target: Target) -> None:
    if target.module:
        sys.argv = [target.module, *target.args]
        runpy.run_module(target.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target.script, *target.args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target.script)))
        runpy.run_path(target.script, run_name="__main__")


def _record(rank: int, summary: str, text: str, exc: Optional[BaseException]) -> None:
    record = write_record(os.environ.get(ERROR_DIR_VAR), rank, summary, text)
    if record is None:  # nobody will read a record: print the whole traceback here
        print(f"scaletrain: rank {rank} failed: {summary}\n{text.rstrip()}", file=sys.stderr, flush=True)
        return
    if exc is not None and record["first"] and os.environ.get("TORCHELASTIC_ERROR_FILE"):
        # torchrun's own report ("Root Cause") reads this file; later failures (peers losing
        # their connection) leave theirs empty so that the root cause is the only traceback.
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        ErrorHandler().record_exception(exc)
    print(f"scaletrain: rank {rank} on host {record['host']} failed: {summary} "
          f"(traceback reported by the launcher)", file=sys.stderr, flush=True)


def run_target(target: Target) -> int:
    """Runs the program as one rank; returns its exit status (failures recorded)."""
    rank = -1
    try:
        rank = prepare_environment(os.environ)
        _run(target)
    except UsageError as exc:
        print(f"scaletrain: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except SystemExit as exc:
        code = exc.code
        if code in (None, 0):
            return 0
        status = code if isinstance(code, int) else 1
        if not isinstance(code, int):
            print(code, file=sys.stderr)
        _record(rank, f"exited with status {status}", f"{target.describe()} exited with status {status}", None)
        return status
    except BaseException as exc:  # noqa: BLE001 - whatever the user's code raised is reported
        text = user_traceback(exc, skip_files=("runpy.py", __file__))
        _record(rank, f"{type(exc).__name__}: {exc}".splitlines()[0][:300], text, exc)
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    try:
        target = parse_target(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"scaletrain: error: {exc}", file=sys.stderr)
        return 2
    return run_target(target)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The rank's work is done. Interpreter finalisation can still hang or abort while Gloo's
    # worker threads free tensors that need the GIL (pytorch/pytorch#75097, #190489), so
    # leave without it.
    os._exit(status)
