"""Compares `scaletrain plan`'s predicted 2-process DDP speedup with `scaletrain bench`'s measured one.

    python benchmarks/plan_vs_bench.py [--workloads synthetic-cnn,digits-mlp] [--rounds 3]

Every command runs under `flock /tmp/scaletrain-bench.lock` (one measurement at a time on a
shared machine; `--lock-held` when the whole script already runs under it); plan and bench
alternate within each round and the medians are compared.
Exits 1 when a workload's median prediction is more than 20% away from its median measurement.
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
LOCK = "/tmp/scaletrain-bench.lock"


LOCK_HELD = False


def _run(args: list[str]) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = ([] if LOCK_HELD else ["flock", LOCK]) + [sys.executable, "-m", "scaletrain", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=True).stdout


def predicted(workload: str) -> tuple[float, dict]:
    doc = json.loads(_run(["plan", "--workload", workload, "--strategy", "ddp", "--world-sizes", "1,2", "--json"]))
    ddp2 = next(p for p in doc["predictions"] if p["strategy"] == "ddp" and p["world_size"] == 2)
    facts = {"step_ms_by_threads": {t: round(s * 1e3, 2) for t, s in doc["probe"]["step_s"].items()},
             "comm_ms": round(ddp2["exposed_comm_s"] * 1e3, 2)}
    return ddp2["speedup"], facts


def measured(workload: str) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        _run(["bench", "--workload", workload, "--nproc", "2", "--no-predict", "--out", f"{tmp}/b"])
        rows = json.loads(Path(f"{tmp}/b/bench.json").read_text())["configurations"]
    base, ddp2 = rows[0], next(r for r in rows if r["strategy"] == "ddp" and r["nproc"] == 2)
    facts = {"baseline_step_ms": round(base["step_s"] * 1e3, 2), "ddp2_step_ms": round(ddp2["step_s"] * 1e3, 2),
             "ddp2_comm_ms": round(ddp2["exposed_comm_s"] * 1e3, 2)}
    return ddp2["speedup"], facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="synthetic-cnn,digits-mlp")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lock-held", action="store_true", help="the caller holds the lock already")
    args = parser.parse_args()
    global LOCK_HELD
    LOCK_HELD = args.lock_held
    ok = True
    for workload in args.workloads.split(","):
        plans, benches = [], []
        for round_index in range(args.rounds):
            order = (predicted, measured) if round_index % 2 == 0 else (measured, predicted)
            for step in order:
                value, facts = step(workload)
                (plans if step is predicted else benches).append(value)
                print(f"{workload} round {round_index + 1}: {step.__name__} {value:.3f}× {facts}", flush=True)
        p, m = statistics.median(plans), statistics.median(benches)
        within = abs(p / m - 1) <= 0.20
        ok &= within
        print(f"{workload}: ddp on 2 processes, median of {args.rounds}: predicted {p:.3f}×, measured {m:.3f}× "
              f"(prediction/measurement {p / m:.3f}, {'within' if within else 'NOT within'} 20%)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
