"""The rank runner: `python -m scaletrain.launchers.rank [--join-timeout SECONDS]
[-m module | script.py] [args...]`.

Every launcher starts the user's program through this, so that the same program works
under spawn, torchrun, mpirun and srun without a line about launchers in it:

1. it detects who started it and fills in torch's env:// variables (RANK, WORLD_SIZE,
   LOCAL_RANK, MASTER_ADDR, ...) from OMPI_COMM_WORLD_* or SLURM_*, so a plain
   `dist.init_process_group("gloo")` works under mpirun and srun too;
2. it names the network interface that reaches the master (GLOO_SOCKET_IFNAME, ...) on
   *this* host, unless the user did;
3. it bounds the start-up: a rank left waiting for peers that never join names them and
   ends (joining.py); and the teardown: a rank frozen in torch's teardown deadlock after
   destroying its process group ends (teardown.py);
4. it runs the program as `__main__` (runpy), and if it fails writes the traceback, rank and
   host where the launcher reads them (and torchrun's error file), so the launcher can show
   the first failure first;
5. once the program has returned it stops the processes the program started and left
   running, then leaves at once with the program's exit status, without interpreter
   finalisation (see `finish`);
6. it stops the rank when its launcher is gone (parent_watch.py), so no rank outlives it.

A rank looks to the program like one torchrun started: a process of its own, with the
platform's default multiprocessing start method, and the program as `__main__`, so a
script without `if __name__ == "__main__":` runs its DataLoader workers as under torchrun.

It imports nothing heavy before the program runs: no torch, not the scaletrain package's
API. A runner that imported them put its own objects, threads and import-time state into
every rank; see docs/launching.md, "A finished rank always ends".
"""

from __future__ import annotations

import os
import signal



def _end_quietly(*_args) -> None:
    os._exit(130)


if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    # Until the program runs, Ctrl-C ends this rank at once and without a traceback (the
    # launcher says it once); run_program gives the program Python's own handler back.
    signal.signal(signal.SIGINT, _end_quietly)

import runpy  # noqa: E402
import sys  # noqa: E402
from typing import Callable, Optional  # noqa: E402

from ..foundation.defaults import HANG_TIMEOUT_S  # noqa: E402
from ..foundation.durations import parse_duration  # noqa: E402
from ..foundation.errors import DetectionError, UsageError  # noqa: E402
from ..process.environment import DistEnv, detect  # noqa: E402
from ..process.startup_timeline import mark as timeline, process_started  # noqa: E402
from .failures import (mark, note_sigterm, say_usage_error, usage_error_recorded, user_traceback,  # noqa: E402
                       write_record)
from .interrupts import STOP_STATUSES  # noqa: E402
from .joining import JoinWatch, exit_after  # noqa: E402
from .launch_plan import ERROR_DIR_VAR, Target  # noqa: E402
from .parent_watch import ParentWatch  # noqa: E402
from .processes import end_descendants  # noqa: E402
from .teardown import TeardownGuard  # noqa: E402

#: Exit status of a rank that gave up waiting for peers that never joined (the same as the
#: hang watchdog's: a peer is missing).
EXIT_PEER_MISSING = 3

ENV_VARS_FROM_DETECTION = {
    "RANK": "rank", "WORLD_SIZE": "world_size", "LOCAL_RANK": "local_rank", "LOCAL_WORLD_SIZE": "local_world_size",
    "GROUP_RANK": "node_rank", "GROUP_WORLD_SIZE": "nnodes", "MASTER_ADDR": "master_addr", "MASTER_PORT": "master_port",
}


def prepare_environment(environ) -> DistEnv:
    """Steps 1 and 2 above, in place. Returns what was detected."""
    from ..process import netif

    env = detect(environ)
    if env.launched and not environ.get("RANK"):
        values = env.as_dict()
        for var, key in ENV_VARS_FROM_DETECTION.items():
            environ.setdefault(var, str(values[key]))
        environ.setdefault("SCALETRAIN_LAUNCHER", env.launcher)  # detection keeps naming the real launcher
    if env.distributed:
        netif.apply(env.master_addr, environ)
    return env


USAGE = "usage: python -m scaletrain.launchers.rank [--join-timeout SECONDS] [-m module | script.py] [args...]"


def parse_args(argv: list[str]) -> tuple[float, Target]:
    join_timeout = HANG_TIMEOUT_S
    if argv[:1] == ["--join-timeout"]:
        try:
            join_timeout = parse_duration(argv[1])
        except (IndexError, ValueError):
            raise UsageError(f"--join-timeout needs a duration; {USAGE}") from None
        argv = argv[2:]
    if not argv or argv[0] in ("-h", "--help"):
        raise UsageError(USAGE)
    if argv[0] == "-m":
        if len(argv) < 2:
            raise UsageError("-m needs a module name, e.g. -m scaletrain train")
        return join_timeout, Target(module=argv[1], args=tuple(argv[2:]))
    return join_timeout, Target(script=argv[0], args=tuple(argv[1:]))


def run_as_main(target: Target) -> None:
    if target.module:
        sys.argv = [target.module, *target.args]
        runpy.run_module(target.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target.script, *target.args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target.script)))
        runpy.run_path(target.script, run_name="__main__")


def record_failure(rank: int, summary: str, text: str, exc: Optional[BaseException], status: int = 1) -> None:
    record = write_record(os.environ.get(ERROR_DIR_VAR), rank, summary, text, status=status)
    if record is None:  # nobody will read a record: print the whole traceback here
        print(f"scaletrain: rank {rank} failed: {summary}\n{text.rstrip()}", file=sys.stderr, flush=True)
        return
    if exc is not None and record["first"] and os.environ.get("TORCHELASTIC_ERROR_FILE"):
        # torchrun's own report ("Root Cause") reads this file; later failures (peers losing
        # their connection) leave theirs empty so that the root cause is the only traceback.
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        ErrorHandler().record_exception(exc)
    told = " (traceback reported by the launcher)" if exc is not None else ""  # a status or a timeout has none
    print(f"scaletrain: rank {rank} on host {record['host']} failed: {summary}{told}", file=sys.stderr, flush=True)


def run_program(body: Callable[[], None], describe: str, join_timeout: float,
                explains_usage_errors: bool = False) -> tuple[int, int]:
    """Runs `body` (the program) as one rank; returns (rank, exit status), failures recorded.
    `explains_usage_errors`: the program exits with status 2 only after printing its own
    one-line error (scaletrain's commands do), so that exit is recorded without a word."""
    rank = -1
    watch = parent = None
    try:
        timeline("rank: process started", process_started())
        timeline("rank: runner")
        env = prepare_environment(os.environ)
        rank = env.rank
        mark(os.environ.get(ERROR_DIR_VAR), rank, "started")
        note_sigterm(os.environ.get(ERROR_DIR_VAR), rank)
        parent = ParentWatch(rank).start()
        if signal.getsignal(signal.SIGINT) is _end_quietly and not explains_usage_errors:
            # A user's program gets Ctrl-C as Python gives it; scaletrain's own commands keep
            # ending at once until their imports are done (interrupts.sigint_as_python): a
            # KeyboardInterrupt raised inside torch's import can break it.
            signal.signal(signal.SIGINT, signal.default_int_handler)
        watch = JoinWatch(env, join_timeout, lambda message: exit_after(
            message, EXIT_PEER_MISSING, lambda m: record_failure(env.rank, m, "", None, EXIT_PEER_MISSING))).start()
        TeardownGuard(lambda: mark(os.environ.get(ERROR_DIR_VAR), env.rank, "teardown")).start()
        body()
    except (UsageError, DetectionError) as exc:
        say_usage_error(str(exc))
        return rank, 2
    except SystemExit as exc:
        code = exc.code
        if code in (None, 0):
            return rank, 0
        status = code if isinstance(code, int) else 1
        if not isinstance(code, int):
            print(code, file=sys.stderr)
        if status in STOP_STATUSES:  # stopped by Ctrl-C, SIGTERM or SIGHUP: the launcher says it once
            return rank, status
        if status == 2 and explains_usage_errors:
            if usage_error_recorded():  # its line went to the launcher (say_usage_error)
                return rank, status
            write_record(os.environ.get(ERROR_DIR_VAR), rank, "a usage error (its line is above)", "", status=2,
                         explained=True)
            return rank, status
        record_failure(rank, f"exited with status {status}", f"{describe} exited with status {status}", None, status)
        return rank, status
    except KeyboardInterrupt:  # Ctrl-C reaches every rank; the launcher says it once
        return rank, 130
    except BaseException as exc:  # noqa: BLE001 - whatever the user's code raised is reported
        text = user_traceback(exc, skip_files=("runpy.py", __file__))
        record_failure(rank, f"{type(exc).__name__}: {exc}".splitlines()[0][:300], text, exc)
        return rank, 1
    finally:
        for thread in (watch, parent):
            if thread is not None:
                thread.stop()
    return rank, 0


def run_target(target: Target, join_timeout: float) -> tuple[int, int]:
    """Runs a launched program as one rank: (rank, exit status). scaletrain's own commands
    print a one-line error before they exit with status 2."""
    return run_program(lambda: run_as_main(target), target.describe(), join_timeout,
                       explains_usage_errors=(target.module or "").split(".")[0] == "scaletrain")


def finish(rank: int, status: int) -> None:
    """Leaves now, with the program's status. The rank's work is done; interpreter
    finalisation (atexit handlers, module teardown, joins of non-daemon threads, Gloo's
    threads freeing tensors that need the GIL) can still block or abort after it, and no
    launcher should wait on that. Output is flushed first, so nothing printed is lost."""
    mark(os.environ.get(ERROR_DIR_VAR), rank, "ended", status)
    end_descendants(os.getpid())  # what the program started and left running ends with it
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def main(argv: Optional[list[str]] = None) -> None:
    try:
        join_timeout, target = parse_args(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"scaletrain: error: {exc}", file=sys.stderr)
        sys.exit(2)
    rank, status = run_target(target, join_timeout)
    finish(rank, status)


if __name__ == "__main__":
    main()
