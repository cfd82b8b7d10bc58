"""Does a finished rank always end? Consecutive runs of a plain torch.distributed DDP script
(examples/plain_ddp.py: no scaletrain import, ends with dist.destroy_process_group()) under
each launcher, interleaved, each with a hard time limit. Prints, per launcher: runs, runs
that hung (still running at the limit after both ranks printed their last line), runs that
failed, and the median wall time; raw torchrun is the reference.

    python benchmarks/teardown.py                       # 50 runs of each, about 25 minutes here
    python benchmarks/teardown.py --runs 5 --launchers spawn,torchrun

A hung run is stopped and counted; with --stacks its threads' C stacks are printed first
(gdb), which is how the teardown deadlock in docs/launching.md was found.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "plain_ddp.py"
TOKEN = "SCALETRAIN_TEARDOWN_BENCH"

COMMANDS = {
    "spawn": [sys.executable, "-m", "scaletrain", "launch", "--launcher", "spawn"],
    "torchrun": [sys.executable, "-m", "scaletrain", "launch", "--launcher", "torchrun"],
    "mpirun": [sys.executable, "-m", "scaletrain", "launch", "--launcher", "mpirun"],
    "raw-torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone"],
}


def marked(token: str) -> list[int]:
    """Every live process that carries this run's token in its environment, whatever its
    session or parent (torchrun starts its workers in sessions of their own)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"{TOKEN}={token}".encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def stacks(pids: list[int]) -> str:
    out = []
    for pid in pids:
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 14"],
                           capture_output=True, text=True, timeout=120)
        out.append(f"--- pid {pid}\n" + "\n".join(line[:160] for line in r.stdout.splitlines()
                                                  if line.startswith(("#", "Thread"))))
    return "\n".join(out)


def telling_line(out: str) -> str:
    """The line of a failed run's output that says most about why."""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    for pattern in ("terminate called", "exitcode:", "failed first", "Error", "error:"):
        found = [line for line in lines if pattern in line]
        if found:
            return found[0][:240]
    return lines[-1][:240] if lines else "(no output)"


def one_run(launcher: str, limit: float, nproc: int, show_stacks: bool) -> tuple[str, float]:
    """('ok' | 'guard' | 'hang' | 'failed: …', seconds)."""
    token = uuid.uuid4().hex
    argv = [*COMMANDS[launcher], "--nproc-per-node", str(nproc), str(SCRIPT), "--steps", "20"]
    env = {**os.environ, TOKEN: token, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                                 os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, cwd=REPO)
    try:
        out, _ = proc.communicate(timeout=limit)
        seconds = time.monotonic() - started
        finished = out.count(f"/{nproc} (local rank") == nproc  # every rank printed its last line
        if proc.returncode == 0 and finished:
            # "guard": a rank froze in torch's teardown and the rank runner ended it (status 0).
            return ("guard" if "froze in torch's teardown" in out else "ok"), seconds
        return f"failed (exit {proc.returncode}): {telling_line(out)}", seconds
    except subprocess.TimeoutExpired:
        if show_stacks:
            print(stacks(marked(token)), flush=True)
        return "hang", time.monotonic() - started
    finally:
        for pid in marked(token):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


@contextlib.contextmanager
def held(lock: Path | None):
    if lock is None:
        yield
        return
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=50, help="runs per launcher (default 50)")
    p.add_argument("--launchers", default="spawn,torchrun,mpirun,raw-torchrun",
                   help=f"comma-separated, from {', '.join(COMMANDS)}")
    p.add_argument("--nproc", type=int, default=2, help="ranks per run (default 2)")
    p.add_argument("--limit", type=float, default=60.0, help="seconds after which a run counts as hung (default 60)")
    p.add_argument("--stacks", action="store_true", help="print the C stacks of a hung run's processes (gdb)")
    p.add_argument("--lock", type=Path, help="hold this lock file during each round (one run of every launcher), "
                                              "so a shared machine can interleave other work between rounds")
    args = p.parse_args()
    launchers = args.launchers.split(",")
    results: dict[str, list[tuple[str, float]]] = {name: [] for name in launchers}
    for run in range(args.runs):  # interleaved: every launcher sees the same machine load
        with held(args.lock):
            round_results = [(name, one_run(name, args.limit, args.nproc, args.stacks)) for name in launchers]
        for name, (outcome, seconds) in round_results:
            results[name].append((outcome, seconds))
            if outcome != "ok":
                print(f"run {run + 1} {name}: {outcome} after {seconds:.1f} s", flush=True)
        print(f"round {run + 1} of {args.runs} done", flush=True)
    print(f"\n{args.runs} consecutive runs of {SCRIPT.relative_to(REPO)} --steps 20, {args.nproc} ranks, "
          f"limit {args.limit:g} s")
    print("(exit 0: ended with status 0, every rank having printed its last line; guard: of those, runs in which "
          "a rank froze in torch's teardown and was ended by the rank runner; seconds: of the exit-0 runs)")
    print(f"{'launcher':14} {'runs':>5} {'exit 0':>7} {'hung':>5} {'failed':>7} {'guard':>6} {'median s':>9} "
          f"{'max s':>7}")
    for name, rows in results.items():
        ok = [s for outcome, s in rows if outcome in ("ok", "guard")]
        hung = sum(outcome == "hang" for outcome, _ in rows)
        guard = sum(outcome == "guard" for outcome, _ in rows)
        median, longest = (f"{statistics.median(ok):.2f}", f"{max(ok):.2f}") if ok else ("-", "-")
        print(f"{name:14} {len(rows):5d} {len(ok):7d} {hung:5d} {len(rows) - len(ok) - hung:7d} {guard:6d} "
              f"{median:>9} {longest:>7}")


if __name__ == "__main__":
    main()
