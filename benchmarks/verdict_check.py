"""Checks the checker: runs `scaletrain bench` several times with its defaults and compares
each verdict and speedup interval with an independent, longer paired measurement.

    python benchmarks/verdict_check.py [--runs 5] [--long-rounds 20] [--workload synthetic-cnn]

The independent measurement does not share bench's code: benchmarks/run_scaletrain_api.py (a
plain training loop on scaletrain's library API, whole epochs timed by the wall clock, the
first epoch left out) started by torchrun on 1 and on 2 processes, in alternating order,
`--long-rounds` times. Its speedup is the median of the per-round ratios (2 processes ÷ 1),
its verdict the same rule as bench's (worth it / not worth it at `--worth-at`, from the 95%
interval). The long rounds are spread between the bench runs (a few before each, the rest
after the last), so that both see the same hours of the machine.

The script takes the lock /tmp/scaletrain-cpu.lock (one measurement at a time on a shared
machine) for each bench run together with the long rounds before it, a few minutes at a
time (`--lock-held` when the whole script already runs under it). Prints a table of the
bench runs and a summary; `--json FILE` writes everything; `--keep DIR` keeps every bench's
folder (bench.json with its probes: benchmarks/plan_vs_bench.py --from reads them). Exits 1
unless every bench verdict agrees with the long measurement's and at least `--runs` − 1
intervals contain its speedup.
"""

from __future__ import annotations

import argparse
import contextlib
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

from scaletrain.bench.verdict import CANNOT_TELL, NOT_WORTH_IT, WORTH_IT, side  # noqa: E402
from scaletrain.foundation.defaults import BENCH_MAX_OTHER_CORES, WORTH_AT_SPEEDUP  # noqa: E402
from scaletrain.measure.machine_load import LoadMeter  # noqa: E402
from scaletrain.measure.spread import paired_ratios, ratio_spread  # noqa: E402


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def machine_lock(lock_held: bool):
    """The shared lock (the one `flock /tmp/scaletrain-cpu.lock` takes) for a stretch of runs."""
    from teardown import held  # benchmarks/teardown.py: the same lock, taken the same way

    return held(None if lock_held else Path(LOCK))


def _run(cmd: list[str], timeout: float = 1800) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def long_round(args, index: int, tmp: Path) -> tuple[float, float]:
    """One round of the independent measurement: (samples/s on 1 process, on 2)."""
    rates = {}
    for nproc in ((1, 2) if index % 2 == 0 else (2, 1)):
        result = tmp / f"long-{index}-{nproc}.json"
        for attempt in range(3):  # a run beside other busy processes is run again, as bench does
            load = LoadMeter()
            _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                  str(REPO / "benchmarks" / "run_scaletrain_api.py"), "--workload", args.workload,
                  "--epochs", str(args.long_epochs), "--result", str(result)])
            others = load.other_cores()
            if others is None or others <= args.max_other_load:
                break
            print(f"long round {index + 1}, {nproc} process(es): run again, other processes kept {others:.2f} cores "
                  "busy", flush=True)
        rates[nproc] = json.loads(result.read_text())["samples_per_second"]
    print(f"long round {index + 1}: 1 process {rates[1]:,.0f} samples/s, 2 processes {rates[2]:,.0f} "
          f"({rates[2] / rates[1]:.3f}×)", flush=True)
    return rates[1], rates[2]


def bench_run(args, index: int, tmp: Path) -> dict:
    out = tmp / f"bench-{index}"
    _run([sys.executable, "-m", "scaletrain", "bench", "--workload", args.workload, "--world-sizes", "1,2",
          *args.bench_args, "--out", str(out)])
    doc = json.loads((out / "bench.json").read_text())
    two = next(r for r in doc["configurations"] if r["strategy"] == "ddp" and r["nproc"] == 2)
    run = {"verdict": doc["verdict"]["kind"], "speedup": two["speedup"], "rounds": two["rounds"],
           "seconds": doc["wall_seconds"], "predicted": (two.get("predicted_speedup") or {}).get("median"),
           "sentence": doc["verdict"]["sentence"], "left_out": len(doc.get("rounds_left_out", []))}
    s = run["speedup"]
    print(f"bench {index + 1}: {run['verdict']}, {s['median']:.3f}× ({s['low']:.3f}–{s['high']:.3f}), "
          f"{run['rounds']} rounds ({run['left_out']} left out), {run['seconds']:.0f} s", flush=True)
    return run


def long_verdict(spread, worth_at: float) -> str:
    placed = side(spread, worth_at)
    return CANNOT_TELL if placed is None else (WORTH_IT if placed else NOT_WORTH_IT)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="bench runs (default 5)")
    p.add_argument("--long-rounds", type=int, default=20, help="rounds of the independent measurement (default 20)")
    p.add_argument("--long-epochs", type=int, default=6, help="epochs per long run, the first left out (default 6)")
    p.add_argument("--workload", default="synthetic-cnn")
    p.add_argument("--worth-at", type=float, default=WORTH_AT_SPEEDUP)
    p.add_argument("--max-other-load", type=float, default=BENCH_MAX_OTHER_CORES,
                   help="a long run beside other processes busier than this many cores is run again (up to 3 times)")
    p.add_argument("--bench-args", default="", help="extra arguments for bench, e.g. '--budget 120' (default none)")
    p.add_argument("--lock-held", action="store_true", help="the caller holds the lock already")
    p.add_argument("--json", type=Path, help="write the runs and the summary to this file")
    p.add_argument("--keep", type=Path, help="keep every run's files in this folder (default: a temporary one)")
    args = p.parse_args()
    args.bench_args = args.bench_args.split()
    per_gap = max(1, args.long_rounds // (args.runs + 1))
    long_rates: list[tuple[float, float]] = []
    runs = []
    with contextlib.ExitStack() as stack:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = args.keep
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="verdict-check-")))
        for i in range(args.runs):
            with machine_lock(args.lock_held):
                for _ in range(per_gap):
                    long_rates.append(long_round(args, len(long_rates), tmp))
                runs.append(bench_run(args, i, tmp))
        while len(long_rates) < args.long_rounds:
            with machine_lock(args.lock_held):
                for _ in range(min(per_gap, args.long_rounds - len(long_rates))):
                    long_rates.append(long_round(args, len(long_rates), tmp))
    ratios = paired_ratios([two for _, two in long_rates], [one for one, _ in long_rates])
    long = ratio_spread(ratios)
    truth = long_verdict(long, args.worth_at)
    print(f"\nindependent measurement: {len(ratios)} paired rounds, 2 processes ÷ 1 = {long.median:.3f}× "
          f"(95% interval {long.low:.3f}–{long.high:.3f}): {truth}")
    print("\n| run | verdict | speedup | 95% interval | contains the long ratio | rounds | left out | seconds | predicted |")
    print("|---:|---|---:|---|---|---:|---:|---:|---:|")
    for i, run in enumerate(runs):
        s = run["speedup"]
        contains = s["low"] <= long.median <= s["high"]
        run.update(agrees=run["verdict"] == truth, contains=contains)
        predicted = "" if run["predicted"] is None else f"{run['predicted']:.3f}×"
        print(f"| {i + 1} | {run['verdict']} | {s['median']:.3f}× | {s['low']:.3f}–{s['high']:.3f}× | "
              f"{'yes' if contains else 'no'} | {run['rounds']} | {run['left_out']} | {run['seconds']:.0f} | {predicted} |")
    agree, contain = sum(r["agrees"] for r in runs), sum(r["contains"] for r in runs)
    print(f"\nverdict agrees with the independent measurement in {agree} of {len(runs)} runs; "
          f"the interval contains its speedup in {contain} of {len(runs)}; "
          f"median bench time {statistics.median(r['seconds'] for r in runs):.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "runs": runs, "long_ratios": ratios,
                                         "long_rates": long_rates, "long": long.as_dict(), "long_verdict": truth,
                                         "agree": agree, "contain": contain}, indent=2))
    return 0 if agree == len(runs) and contain >= len(runs) - 1 else 1


if __name__ == "__main__":
    sys.exit(main())
