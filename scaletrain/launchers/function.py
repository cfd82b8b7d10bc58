"""`scaletrain.launch(fn, nproc=2, args=...)`: a function on N local ranks, from Python or a
notebook, as `scaletrain launch` runs a script.

Each rank is a fresh process (multiprocessing's `spawn`: no fork of a process that may hold
threads or a CUDA context; in it, the platform's default start method again) with torch's
env:// variables set, so `fn` calls
`scaletrain.init()` or `torch.distributed.init_process_group()` as a script would. `fn` and
its arguments travel by pickle: `fn` must be importable by name in a new process (defined
in a module, or in the `__main__` of a script file, not in a notebook cell). Rank 0's
return value comes back; a failure raises LaunchError carrying the failing rank's
traceback, the first failure first.
"""

from __future__ import annotations

import functools
import os
import pickle
from pathlib import Path
from typing import Any, Callable, Optional

from ..foundation.defaults import HANG_TIMEOUT_S
from ..foundation.durations import as_seconds
from ..foundation.errors import UsageError
from .facade import prepare, run_job
from .failures import RESULT_FILE
from .launch_plan import ERROR_DIR_VAR, Plan, Target
from .request import LaunchRequest
from .spawn import RankFunction, run_children


class LaunchError(RuntimeError):
    """A rank of `scaletrain.launch(fn)` failed. `rank` is the first failing rank,
    `traceback` its traceback as text, `exit_status` the job's."""

    def __init__(self, message: str, rank: Optional[int], traceback: str, exit_status: int):
        super().__init__(message)
        self.rank, self.traceback, self.exit_status = rank, traceback, exit_status


def _run_function(fn: Callable, args: tuple, kwargs: dict, plan: Plan) -> None:
    """Each child: the rank runner around `fn`; rank 0 leaves its return value behind."""
    from .rank import finish, run_program

    returned = []
    rank, status = run_program(lambda: returned.append(fn(*args, **kwargs)), plan.target.describe(),
                               plan.join_timeout)
    if status == 0 and rank == 0:
        status = _leave_result(returned[0], rank)
    finish(rank, status)


def _leave_result(value: Any, rank: int) -> int:
    from .rank import record_failure

    try:
        data = pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 - whatever pickle raises, the value cannot travel
        record_failure(rank, f"its return value cannot be pickled ({type(exc).__name__}: {exc})", "", None)
        return 1
    folder = Path(os.environ[ERROR_DIR_VAR])
    (folder / f"{RESULT_FILE}.tmp").write_bytes(data)
    os.replace(folder / f"{RESULT_FILE}.tmp", folder / RESULT_FILE)
    return 0


def _check_picklable(fn: Callable, args: tuple, kwargs: dict) -> None:
    try:
        pickle.dumps((fn, args, kwargs))
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"scaletrain.launch needs a picklable function and arguments: {type(exc).__name__}: {exc} "
                         "(define the function in a module, or at the top level of a script, and import it)") from None


def launch(fn: Callable, nproc: int = 2, args: tuple = (), kwargs: Optional[dict] = None,
           timeout=HANG_TIMEOUT_S) -> Any:
    """Runs `fn(*args, **kwargs)` on `nproc` local ranks; returns rank 0's return value.
    Raises LaunchError with the first failing rank's traceback. `timeout` (seconds or a
    timedelta) bounds the start-up: a rank that never joins the process group is named."""
    kwargs = dict(kwargs or {})
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise UsageError(f"nproc={nproc!r}: give a whole number of processes, at least 1")
    _check_picklable(fn, tuple(args), kwargs)
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}()"
    request = LaunchRequest(Target(script=name), launcher="spawn", nproc_per_node=nproc,
                            timeout=as_seconds(timeout)).with_host_facts()
    launcher, request, plan = prepare(request)
    launcher.preflight(request)
    body = functools.partial(_run_function, fn, tuple(args), kwargs)
    job = run_job(lambda j: run_children(plan, j, lambda rank, env: RankFunction(body, plan, env)))
    if job.signum is not None:
        raise KeyboardInterrupt
    if job.code == 0 and not job.records and job.result is not None:
        return pickle.loads(job.result)
    first = job.records[0] if job.records else None
    where = f"rank {first['rank']} failed first: {first['summary']}" if first else f"exit status {job.code}"
    text = first["traceback"] if first else ""
    raise LaunchError(f"{name} on {nproc} ranks: {where}" + (f"\n{text.rstrip()}" if text else ""),
                      first["rank"] if first else None, text, job.code or 1)
