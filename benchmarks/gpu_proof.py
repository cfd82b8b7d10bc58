"""The GPU proof: every GPU check of scaletrain's, in the order of what each is worth, inside
one deadline, into one table (`scripts/gpu-proof.sh` runs it; see its header).

Parts, in order (each a process of its own, with a timeout of its own that the deadline
shortens; a part that fails, times out or finds no time left is a row saying so, never the
end of the script; the table is written again after every part):

1. wheels       torchtitan, torchao and what torchtitan imports that a GPU machine lacks,
                installed from scripts/gpu-wheels/ into OUT/deps (no network)
2. gpu-check    scripts/gpu-check.sh's one-GPU correctness rows (strategies, context parallel)
3. calibration  benchmarks/calibrate_gpu.py: this GPU's kernels, for the planner
4. step check   benchmarks/gpu_step_check.py: `scaletrain train --model-config` of a 1.24 B
                grouped-query Llama, four configurations, against the plan
5. torchtitan   benchmarks/gpu_vs_torchtitan.py, eager
6. torchtitan   the same, both compiled
7. float8       benchmarks/gpu_float8_check.py: bf16 eager, bf16 compiled, float8
8. gpu-check    its other one-GPU rows (memory against the plan, doctor, hang detection)

    python benchmarks/gpu_proof.py --out runs/gpu-proof              # on a GPU
    python benchmarks/gpu_proof.py --out DIR --dry-run --table FILE  # on a CPU: tiny shapes, every part

The table (`--table`, default docs/gpu-results.md) names the GPU and torch's version; each
part's own files are under OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_proof_rows as rows_of  # noqa: E402  (beside this file)

WHEELS = ROOT / "scripts" / "gpu-wheels"
DEADLINE_S = 480.0  # the parts' time, inside the 9 minutes the script is given on one GPU
#: gpu-check's one-GPU rows (pytest's -k): correctness first; memory, the tools and hang
#: detection last, in what time is left (its speed rows, minutes of benchmarks, are not run).
GPU_CHECK_ROWS = "strategies or context_parallel"
GPU_CHECK_REST = "memory or tools or faults"


@dataclass
class Part:
    name: str
    what: str
    argv: Callable[["Proof"], list]
    budget: float  # seconds it may take at most (the deadline may leave less)
    rows: Callable[["Proof", "Part", subprocess.CompletedProcess], list]
    env: dict = field(default_factory=dict)


class Proof:
    def __init__(self, out: Path, table: Path, dry: bool, deadline: float):
        self.out, self.table, self.dry = out, table, dry
        self.ends = time.monotonic() + deadline
        self.rows: list[dict] = []
        self.machine = rows_of.machine()
        self.deps = out / "deps"

    def python(self, script: str, *args) -> list:
        return [sys.executable, str(ROOT / "benchmarks" / script), *args, *(["--dry-run"] if self.dry else [])]

    def env(self) -> dict:
        path = [str(self.deps), str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}

    def run(self, part: Part) -> None:
        left = self.ends - time.monotonic()
        if left < 10:
            self.add(part.name, part.what, "not run", f"no time left before the deadline ({left:.0f} s)")
            return
        timeout = min(part.budget, left)
        began = time.monotonic()
        done = _run(part.argv(self), timeout, {**self.env(), **part.env})
        (self.out / f"{part.name}.log").write_text(f"$ {' '.join(map(str, done.args))}\n{done.stdout}\n{done.stderr}")
        try:
            found = part.rows(self, part, done)
        except Exception as exc:  # noqa: BLE001 - a part's results that cannot be read are a row
            found = [{"check": part.what, "result": "FAIL", "detail": f"its results could not be read: "
                      f"{type(exc).__name__}: {exc}"}]
        if getattr(done, "timed_out", None):
            found.append({"check": part.what, "result": "FAIL", "detail": f"stopped after {timeout:.0f} s"})
        for row in found or [{"check": part.what, "result": "FAIL", "detail": rows_of.last_line(done)}]:
            self.add(part.name, row["check"], row["result"], row.get("detail", ""), time.monotonic() - began)
        self.write()

    def add(self, part: str, check: str, result: str, detail: str, seconds: float = 0.0) -> None:
        self.rows.append({"part": part, "check": check, "result": result, "detail": detail, "seconds": seconds})
        print(f"{result:8} {part}: {check} — {detail}", flush=True)

    def write(self) -> None:
        self.table.parent.mkdir(parents=True, exist_ok=True)
        self.table.write_text(rows_of.markdown(self.machine, self.rows, self.dry))
        (self.out / "gpu-proof.json").write_text(json.dumps({"machine": self.machine, "rows": self.rows}, indent=1))


def _run(argv: list, timeout: float, env: dict) -> subprocess.CompletedProcess:
    """`argv` in a session of its own; past `timeout`, every process it started is killed (a
    part's workers must not hold the GPU through the next part)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                                start_new_session=True)
    except OSError as exc:
        return subprocess.CompletedProcess(argv, -1, "", str(exc))
    timed_out = None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = timeout
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind
        except ProcessLookupError:
            pass
    done = subprocess.CompletedProcess(argv, proc.returncode, out or "", err or "")
    done.timed_out = timed_out
    return done


def parts(dry: bool) -> list[Part]:
    tt = ["--window", "2", "--timeout", "100"]
    return [
        Part("wheels", "torchtitan, torchao and their needs from scripts/gpu-wheels (offline)",
             lambda p: [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--find-links",
                        str(WHEELS), "--target", str(p.deps), *sorted(map(str, WHEELS.glob("*.whl")))],
             90, rows_of.wheels),
        Part("gpu-check", "gpu-check's one-GPU rows", lambda p: ["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--out",
                                                                str(p.out / "gpu-check"), "-k", GPU_CHECK_ROWS],
             150, rows_of.gpu_check),
        Part("calibration", "this GPU's kernels", lambda p: p.python("calibrate_gpu.py", "--out",
                                                                     str(p.out / "calibration")), 60,
             rows_of.calibration),
        Part("step-check", "the plan against measured steps", lambda p: p.python(
            "gpu_step_check.py", "--out", str(p.out / "step-check"), "--run-timeout", "60",
            *rows_of.calibration_argument(p.out / "calibration")), 200, rows_of.step_check),
        Part("torchtitan-eager", "scaletrain against torchtitan, eager",
             lambda p: p.python("gpu_vs_torchtitan.py", "--out", str(p.out / "torchtitan-eager"), *tt), 210,
             rows_of.torchtitan),
        Part("torchtitan-compiled", "scaletrain against torchtitan, both compiled",
             lambda p: p.python("gpu_vs_torchtitan.py", "--out", str(p.out / "torchtitan-compiled"), "--compile", *tt),
             210, rows_of.torchtitan),
        Part("float8", "float8 against bf16 (eager and compiled)",
             lambda p: p.python("gpu_float8_check.py", "--out", str(p.out / "float8"), "--timeout", "90"), 240,
             rows_of.float8),
        Part("gpu-check-rest", "gpu-check's other one-GPU rows", lambda p: [
            "bash", str(ROOT / "scripts" / "gpu-check.sh"), "--out", str(p.out / "gpu-check-rest"), "-k",
            GPU_CHECK_REST], 150, rows_of.gpu_check),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / time.strftime("gpu-proof-%Y%m%d-%H%M%S"))
    p.add_argument("--table", type=Path, default=ROOT / "docs" / "gpu-results.md")
    p.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds all the parts may take together")
    p.add_argument("--dry-run", action="store_true", help="on a CPU: every part with tiny shapes")
    p.add_argument("--parts", help="only these parts (comma-separated names)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    proof = Proof(args.out, args.table, args.dry_run, args.deadline)
    chosen = [part for part in parts(args.dry_run) if not args.parts or part.name in args.parts.split(",")]
    proof.write()
    for part in chosen:
        proof.run(part)
    proof.write()
    failed = sum(row["result"] == "FAIL" for row in proof.rows)
    print(f"gpu-proof: {len(proof.rows)} rows, {failed} failed; the table is {args.table}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
