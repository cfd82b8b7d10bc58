"""The one way to launch, used by the command line (`scaletrain launch`, `scaletrain
train`, `bench`, `comm`, `plan`) and by Python (`run_script`, `scaletrain.launch`):

    request -> node defaults -> launcher.resolve -> network choice -> launcher.plan
            -> print it (--dry-run) | write the batch script (--sbatch)
            | launcher.preflight -> before_start() -> launcher.execute -> report
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..foundation.defaults import TEARDOWN_GRACE_S
from ..foundation.errors import UsageError
from ..process import netif
from .base import Job, Launcher
from .failures import RESULT_FILE, frozen_in_teardown, read_records, report
from .interrupts import Interrupts
from .launch_plan import Plan, Target
from .node import node_defaults
from .registry import launcher_for
from .request import LaunchRequest, rendezvous


def prepare(req: LaunchRequest) -> tuple[Launcher, LaunchRequest, Plan]:
    """Resolve, look at the network, build: everything short of running."""
    req = node_defaults(req)
    launcher = launcher_for(req)
    req = launcher.resolve(req)
    host, _port = rendezvous(req)
    network = netif.choose(host, req.environ) if launcher.chooses_network and host else None
    return launcher, req, launcher.plan(req, network)


@dataclass(frozen=True)
class JobResult:
    code: int                        # the job's exit status
    records: list                    # failure records, the first failure first
    signum: Optional[int]            # Ctrl-C / SIGTERM received while it ran
    result: Optional[bytes]          # rank 0's pickled return value (scaletrain.launch(fn))
    frozen: list                     # ranks the teardown guard ended (marks)


def run_job(body: Callable[[Job], int], announce: bool = True) -> JobResult:
    """Runs `body(job)` with a fresh folder for failure records, and signals caught
    (`announce`: said at once; see Interrupts)."""
    error_dir = tempfile.mkdtemp(prefix="scaletrain-errors-")
    try:
        with Interrupts(announce) as interrupts:
            code = interrupts.status(body(Job(error_dir, interrupts)))
        result = Path(error_dir, RESULT_FILE)
        records = [r for r in read_records(error_dir) if code or not r.get("guessed")]
        return JobResult(code, records, interrupts.signum,
                         result.read_bytes() if result.exists() else None, frozen_in_teardown(error_dir))
    finally:
        shutil.rmtree(error_dir, ignore_errors=True)


def execute(launcher: Launcher, plan: Plan, announce: bool = True) -> int:
    """Runs the plan's part for this node; returns the job's exit status, after showing
    the first failure first (after Ctrl-C/SIGTERM: 130/143, and nothing more to say)."""
    job = run_job(lambda j: launcher.execute(plan, j), announce)
    # After Ctrl-C or SIGTERM every rank was being stopped anyway: a frozen teardown among
    # them is nothing the user needs to read.
    for m in job.frozen if job.signum is None else []:
        print(f"scaletrain: note: rank {m['rank']} on host {m['host']} (pid {m['pid']}) froze in torch's teardown "
              f"after destroying its process group (its main thread held the GIL for {TEARDOWN_GRACE_S:g} s without "
              "a break: the Gloo teardown deadlock); it was ended with status 0", file=sys.stderr)
    if job.signum is None and (job.code or job.records):
        report(job.records, job.code or 1, launcher.name)
        # The first failing rank's own status where it is known: torchrun answers 1 whatever
        # its workers' statuses were.
        return (job.records[0].get("status") if job.records else None) or job.code or 1
    return job.code


def run(req: LaunchRequest, dry_run: bool = False, before_start: Optional[Callable[[], object]] = None,
        announce: bool = True) -> int:
    """Plan; then print it (dry run), write the batch script (--sbatch), or check and run
    it. `before_start` runs once every check has passed, so that a failed check leaves
    nothing behind (the trainer creates its output folder there). `announce`: a signal that
    stops the job is said at once (False: the caller says it, with what it means)."""
    launcher, req, plan = prepare(req)
    if dry_run:
        print(plan.render())
        return 0
    if req.sbatch:
        write_batch(req.sbatch, plan.batch_script or "")
        print(f"scaletrain: wrote {req.sbatch}; submit it with: sbatch {req.sbatch}")
        return 0
    launcher.preflight(req)
    if before_start:
        before_start()
    sys.stdout.flush()
    return execute(launcher, plan, announce)


def write_batch(path: Path, text: str) -> None:
    if path.exists():
        raise UsageError(f"--sbatch {path} exists already; choose a new file name")
    try:
        path.write_text(text)
        path.chmod(0o755)
    except OSError as exc:
        raise UsageError(f"--sbatch {path} cannot be written ({exc.strerror}); choose another path") from None


def run_script(script: str, *args: str, nproc: int = 2, module: Optional[str] = None, launcher: str = "spawn",
               announce: bool = True, timeout: Optional[float] = None) -> int:
    """Runs `script` (or `module`, like `python -m`) on `nproc` local ranks; from Python or a
    notebook. Returns the exit status; the first failure's traceback goes to stderr.
    `timeout`: seconds a rank may take to join (start-up), as `launch --timeout`."""
    target = Target(module=module, args=args) if module else Target(script=script, args=args)
    extra = {"timeout": timeout} if timeout is not None else {}
    return run(LaunchRequest(target, launcher=launcher, nproc_per_node=nproc, **extra).with_host_facts(),
               announce=announce)
