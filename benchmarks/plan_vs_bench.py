"""How far `scaletrain plan`'s predicted 2-process DDP speedup is from the measured one, per
workload, over several `scaletrain bench` runs.

    python benchmarks/plan_vs_bench.py [--workloads synthetic-cnn,synthetic-mlp,digits-cnn,digits-mlp] [--runs 5]

Each bench run (defaults: `--world-sizes 1,2`, rounds until decided or the budget) measures the plan's
components in every round, as `scaletrain plan` does, and records the prediction beside the
measurement. For each workload the table shows the median over the runs of the predicted and
of the measured speedup, the error of the medians, and every run's own error. Every bench runs
under `flock /tmp/scaletrain-cpu.lock` (`--lock-held` when the whole script already does);
workloads alternate run by run. Exits 1 when a workload's error is beyond `--tolerance`
(default 15%).

    python benchmarks/plan_vs_bench.py --from DIR [--from DIR2 ...]

reads bench runs already made instead (every bench.json under DIR, e.g. the folders that
`verdict_check.py --keep DIR` keeps), grouped by workload. Either way the predictions are
made again from each round's recorded measurements (bench.json's "probes") with the cost
model as it is now, so a change to the model is judged on the same measurements;
`--keep DIR` keeps the new runs' folders.
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


sys.path.insert(0, str(REPO))

from scaletrain.measure.spread import paired_ratios, ratio_spread  # noqa: E402
from scaletrain.plan.machine import default_machine  # noqa: E402
from scaletrain.plan.predict import predict  # noqa: E402
from scaletrain.plan.probe import probe_from_dict  # noqa: E402


def predicted_again(doc: dict) -> dict:
    """The 2-process DDP prediction from each round's recorded probe, with today's cost model:
    {"speedup": per-round predicted speedups against DDP on one process, "comm_ms": ...}."""
    options = default_machine("cpu", nproc_per_node=2)
    ones, twos = [], []
    for recorded in doc["probes"]:
        probe = probe_from_dict(recorded)
        ones.append(predict(probe, "ddp", 1, options))
        twos.append(predict(probe, "ddp", 2, options))
    speedups = paired_ratios([p.samples_per_s for p in twos], [p.samples_per_s for p in ones])
    return {"speedups": speedups, "comm_ms": sorted(p.exposed_comm_s * 1e3 for p in twos)[len(twos) // 2]}


def summary_of(doc: dict) -> dict:
    """One bench run's measured and predicted 2-process speedup."""
    two = next(r for r in doc["configurations"] if r["strategy"] == "ddp" and r["nproc"] == 2)
    again = predicted_again(doc)
    predicted = ratio_spread(again["speedups"])
    return {"workload": doc["settings"]["workload"], "predicted": predicted.median, "measured": two["speedup"]["median"],
            "measured_interval": [two["speedup"]["low"], two["speedup"]["high"]],
            "predicted_interval": [predicted.low, predicted.high],
            "recorded_prediction": (two.get("predicted_speedup") or {}).get("median"),
            "rounds": two["rounds"], "verdict": doc["verdict"]["kind"],
            "comm_ms": {"predicted": again["comm_ms"], "measured": two["exposed_comm_s"]["median"] * 1e3}}


def bench(workload: str, out: Path, extra: list[str], lock_held: bool) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "scaletrain", "bench", "--workload", workload, "--world-sizes", "1,2", *extra,
           "--out", str(out)]
    done = subprocess.run(cmd if lock_held else ["flock", LOCK, *cmd], capture_output=True, text=True, timeout=1800,
                          env=env, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return summary_of(json.loads((out / "bench.json").read_text()))


def _print_run(w: str, i: int, run: dict) -> None:
    print(f"{w} run {i + 1}: predicted {run['predicted']:.3f}×, measured {run['measured']:.3f}× "
          f"({run['rounds']} rounds, {run['verdict']}); communication {run['comm_ms']['predicted']:.1f} "
          f"ms predicted, {run['comm_ms']['measured']:.1f} ms measured", flush=True)


def recorded_runs(folders: list[Path], workloads: list[str]) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {w: [] for w in workloads}
    for folder in folders:
        for path in sorted(folder.glob("**/bench.json")):
            run = summary_of(json.loads(path.read_text()))
            if run["workload"] in runs:
                runs[run["workload"]].append(run)
                _print_run(run["workload"], len(runs[run["workload"]]) - 1, run)
    return {w: rs for w, rs in runs.items() if rs}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="synthetic-cnn,synthetic-mlp,digits-cnn,digits-mlp")
    p.add_argument("--runs", type=int, default=5, help="bench runs per workload (default 5)")
    p.add_argument("--tolerance", type=float, default=0.15, help="largest acceptable error of the medians")
    p.add_argument("--bench-args", default="", help="extra arguments for bench (default none)")
    p.add_argument("--lock-held", action="store_true", help="the caller holds the lock already")
    p.add_argument("--json", type=Path, help="write every run's figures to this file")
    p.add_argument("--keep", type=Path, help="keep the bench runs' folders here (default: a temporary folder)")
    p.add_argument("--from", dest="recorded", type=Path, action="append", default=[],
                   help="read the bench runs under this folder instead of running new ones (repeatable)")
    args = p.parse_args()
    workloads = args.workloads.split(",")
    if args.recorded:
        runs = recorded_runs(args.recorded, workloads)
    else:
        runs = {w: [] for w in workloads}
        with tempfile.TemporaryDirectory(prefix="plan-vs-bench-") as tmp:
            folder = args.keep or Path(tmp)
            for i in range(args.runs):
                for w in (workloads if i % 2 == 0 else workloads[::-1]):
                    runs[w].append(bench(w, folder / f"{w}-{i}", args.bench_args.split(), args.lock_held))
                    _print_run(w, i, runs[w][-1])
    print("\n| workload | runs | median predicted | median measured | error | each run's error | verdicts |")
    print("|---|---:|---:|---:|---:|---|---|")
    ok = True
    summary = {}
    for w, rs in runs.items():
        predicted = statistics.median(r["predicted"] for r in rs)
        measured = statistics.median(r["measured"] for r in rs)
        error = predicted / measured - 1
        ok &= abs(error) <= args.tolerance
        each = ", ".join(f"{r['predicted'] / r['measured'] - 1:+.0%}" for r in rs)
        verdicts = ", ".join(sorted({r["verdict"] for r in rs}))
        print(f"| {w} | {len(rs)} | {predicted:.3f}× | {measured:.3f}× | {error:+.1%} | {each} | {verdicts} |")
        summary[w] = {"predicted": predicted, "measured": measured, "error": error}
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": summary}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
