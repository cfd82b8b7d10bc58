"""Where the start-up to the first training step goes: `scaletrain train` against hand-written DDP
under `torchrun`, as timelines of the command and its ranks.

    flock /tmp/scaletrain-cpu.lock python benchmarks/startup_timeline.py [--reps 5] [--out timeline.md]

Each repetition runs both (alternately, the order rotated) with SCALETRAIN_TIMELINE set: every
process appends its milestones (scaletrain/process/startup_timeline.py; run_raw_ddp.py notes the same ones
through bench_common.timeline). Times are from the start of the command's process (torchrun's
agent, or `scaletrain train`); a rank's milestone is the later of the two ranks' (the step
waits for both). The table gives each milestone's median over the repetitions, and the
start-up to the first step of each repetition (paired ratio trainer ÷ raw).
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def commands(workload: str, nproc: int, out: Path, result: Path) -> dict[str, list[str]]:
    return {
        "raw": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                str(HERE / "run_raw_ddp.py"), "--workload", workload, "--epochs", "2", "--max-steps", "3",
                "--result", str(result)],
        "trainer": [sys.executable, "-m", "scaletrain", "train", "--workload", workload, "--nproc-per-node", str(nproc),
                    "--max-steps", "3", "--out", str(out)],
    }


def timeline_of(path: Path) -> dict[str, float]:
    """{milestone: seconds after the command's process started} (a rank's: the latest rank's)."""
    events = [json.loads(line) for line in path.read_text().splitlines()]
    start = min(e["t"] for e in events if e["event"] == "command: process started")
    found: dict[str, float] = {}
    for e in events:
        if e["event"] == "command: process started":
            continue
        found[e["event"]] = max(found.get(e["event"], float("-inf")), e["t"] - start)
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--workload", default="synthetic-cnn")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--out", type=Path, help="also write the Markdown tables here")
    args = p.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PYTHONWARNINGS": "ignore"}
    runs: dict[str, list[dict]] = {"raw": [], "trainer": []}
    with tempfile.TemporaryDirectory(prefix="scaletrain-timeline-") as tmp:
        for rep in range(args.reps):
            for name in (("raw", "trainer") if rep % 2 == 0 else ("trainer", "raw")):
                timeline = Path(tmp) / f"{name}-{rep}.jsonl"
                argv_ = commands(args.workload, args.nproc, Path(tmp) / f"out-{rep}", Path(tmp) / f"raw-{rep}.json")[name]
                done = subprocess.run(argv_, env={**env, "SCALETRAIN_TIMELINE": str(timeline)}, cwd=REPO,
                                      capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
                runs[name].append(timeline_of(timeline))
    lines = []
    for name, found in runs.items():
        events = sorted({e for run in found for e in run}, key=lambda e: statistics.median(r[e] for r in found if e in r))
        lines += [f"**{name}**" + (" (hand-written DDP under torchrun)" if name == "raw" else " (`scaletrain train`)"), "",
                  "| milestone | seconds after the command started (median) |", "|---|---:|"]
        lines += [f"| {e} | {statistics.median(r[e] for r in found if e in r):.2f} |" for e in events]
        lines.append("")
    first = "rank: first step done"
    pairs = [(t[first], r[first]) for t, r in zip(runs["trainer"], runs["raw"])]
    lines += ["| repetition | raw s | trainer s | trainer ÷ raw |", "|---:|---:|---:|---:|"]
    lines += [f"| {i + 1} | {r:.2f} | {t:.2f} | {t / r:.2f} |" for i, (t, r) in enumerate(pairs)]
    raw_median, trainer_median = statistics.median(r for _, r in pairs), statistics.median(t for t, _ in pairs)
    lines += ["", f"Start-up to the first step, median: raw {raw_median:.2f} s, trainer {trainer_median:.2f} s "
                  f"({trainer_median / raw_median:.2f}×; paired median {statistics.median(t / r for t, r in pairs):.2f}×), "
                  f"{args.reps} repetitions, {args.workload}, {args.nproc} processes."]
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
