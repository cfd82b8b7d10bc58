"""How far `scaletrain plan`'s predicted 2-process DDP speedup is from the measured one, per
workload, over several `scaletrain bench` runs.

    python benchmarks/plan_vs_bench.py [--workloads synthetic-cnn,synthetic-mlp,digits-cnn,digits-mlp] [--runs 5]

Each bench run (defaults: `--nproc 1,2`, rounds until decided or the budget) measures the plan's
components in every round, as `scaletrain plan` does, and records the prediction beside the
measurement. For each workload the table shows the median over the runs of the predicted and
of the measured speedup, the error of the medians, and every run's own error. Every bench runs
under `flock /tmp/scaletrain-cpu.lock` (`--lock-held` when the whole script already does);
workloads alternate run by run. Exits 1 when a workload's error is beyond `--tolerance`
(default 15%).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = "/tmp/scaletrain-cpu.lock"


def bench(workload: str, out: Path, extra: list[str], lock_held: bool) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "scaletrain", "bench", "--workload", workload, "--nproc", "1,2", *extra,
           "--out", str(out)]
    done = subprocess.run(cmd if lock_held else ["flock", LOCK, *cmd], capture_output=True, text=True, timeout=1800,
                          env=env, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    doc = json.loads((out / "bench.json").read_text())
    two = next(r for r in doc["configurations"] if r["strategy"] == "ddp" and r["nproc"] == 2)
    return {"predicted": two["predicted_speedup"]["median"], "measured": two["speedup"]["median"],
            "measured_interval": [two["speedup"]["low"], two["speedup"]["high"]],
            "predicted_interval": [two["predicted_speedup"]["low"], two["predicted_speedup"]["high"]],
            "rounds": two["rounds"], "verdict": doc["verdict"]["kind"],
            "comm_ms": {"predicted": two["predicted_exposed_comm_s"]["median"] * 1e3,
                        "measured": two["exposed_comm_s"]["median"] * 1e3}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="synthetic-cnn,synthetic-mlp,digits-cnn,digits-mlp")
    p.add_argument("--runs", type=int, default=5, help="bench runs per workload (default 5)")
    p.add_argument("--tolerance", type=float, default=0.15, help="largest acceptable error of the medians")
    p.add_argument("--bench-args", default="", help="extra arguments for bench (default none)")
    p.add_argument("--lock-held", action="store_true", help="the caller holds the lock already")
    p.add_argument("--json", type=Path, help="write every run's figures to this file")
    args = p.parse_args()
    workloads = args.workloads.split(",")
    runs: dict[str, list[dict]] = {w: [] for w in workloads}
    with tempfile.TemporaryDirectory(prefix="plan-vs-bench-") as tmp:
        for i in range(args.runs):
            for w in (workloads if i % 2 == 0 else workloads[::-1]):
                run = bench(w, Path(tmp) / f"{w}-{i}", args.bench_args.split(), args.lock_held)
                runs[w].append(run)
                print(f"{w} run {i + 1}: predicted {run['predicted']:.3f}×, measured {run['measured']:.3f}× "
                      f"({run['rounds']} rounds, {run['verdict']}); communication {run['comm_ms']['predicted']:.1f} "
                      f"ms predicted, {run['comm_ms']['measured']:.1f} ms measured", flush=True)
    print("\n| workload | median predicted | median measured | error | each run's error | verdicts |")
    print("|---|---:|---:|---:|---|---|")
    ok = True
    summary = {}
    for w, rs in runs.items():
        predicted = statistics.median(r["predicted"] for r in rs)
        measured = statistics.median(r["measured"] for r in rs)
        error = predicted / measured - 1
        ok &= abs(error) <= args.tolerance
        each = ", ".join(f"{r['predicted'] / r['measured'] - 1:+.0%}" for r in rs)
        verdicts = ", ".join(sorted({r["verdict"] for r in rs}))
        print(f"| {w} | {predicted:.3f}× | {measured:.3f}× | {error:+.1%} | {each} | {verdicts} |")
        summary[w] = {"predicted": predicted, "measured": measured, "error": error}
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": summary}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
