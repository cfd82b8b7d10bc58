"""Measures every strategy on one workload: samples/s, held-out accuracy and per-process
memory of parameters, gradients and optimizer state, as medians over rounds in which the
configurations alternate (the machine is shared and noisy: compare within one run).

    flock /tmp/scaletrain-bench.lock python scripts/bench_strategies.py --rounds 3 > bench.md

Each configuration is one `scaletrain train` run; its summary.json holds the numbers."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {
    "single": ["--strategy", "single"],
    "dp": ["--strategy", "dp"],
    "mp (2 parts)": ["--strategy", "mp", "--devices-per-process", "2"],
    "mp (2 parts, 4 micro-batches)": ["--strategy", "mp", "--devices-per-process", "2", "--microbatches", "4"],
    "ddp": ["--strategy", "ddp", "--nproc-per-node", "2"],
    "hybrid (2 parts each)": ["--strategy", "hybrid", "--nproc-per-node", "2", "--devices-per-process", "2"],
    "pipeline gpipe (4 micro-batches)": ["--strategy", "pipeline", "--nproc-per-node", "2", "--schedule", "gpipe",
                                         "--microbatches", "4"],
    "pipeline 1f1b (4 micro-batches)": ["--strategy", "pipeline", "--nproc-per-node", "2", "--schedule", "1f1b",
                                        "--microbatches", "4"],
    "fsdp": ["--strategy", "fsdp", "--nproc-per-node", "2"],
}


def run_one(args: list[str], extra: list[str], out: Path, timeout: float) -> dict | None:
    """One run's summary, or None (said on stderr) when it failed or overran: the other
    measurements still count."""
    proc = subprocess.Popen([sys.executable, "-m", "scaletrain", "train", *args, *extra, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and every rank it started
        proc.communicate()
        print(f"overran {timeout:.0f}s, left out: {args}", file=sys.stderr, flush=True)
        return None
    if proc.returncode:
        print(f"failed, left out: {args}\n{err[-2000:]}", file=sys.stderr, flush=True)
        return None
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    p.add_argument("--only", nargs="*", help="configuration names to run (default: all)")
    p.add_argument("extra", nargs="*", help="more `scaletrain train` flags, after --")
    a = p.parse_args()
    names = [n for n in CONFIGS if not a.only or n in a.only]
    results: dict[str, list[dict]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # rotate: no configuration always first
            for i, name in enumerate(order):
                summary = run_one(CONFIGS[name], a.extra, Path(tmp) / f"{r}-{i}", a.timeout)
                if summary is None:
                    continue
                results[name].append(summary)
                print(f"round {r + 1}: {name}: {summary['samples_per_second']:.0f} samples/s, "
                      f"accuracy {summary['final_accuracy']:.4f}", file=sys.stderr, flush=True)
    base = statistics.median(s["samples_per_second"] for s in results[names[0]] or [{"samples_per_second": 1}])
    print(f"| strategy | processes | samples/s, median of runs (min–max) | median vs {names[0]} "
          "| held-out accuracy (min–max) | params+grads+optimizer per process (KiB) |")
    print("|---|---|---|---|---|---|")
    for name in names:
        runs = results[name]
        if not runs:
            print(f"| {name} | — | every run failed | | | |")
            continue
        speeds = [s["samples_per_second"] for s in runs]
        speed = statistics.median(speeds)
        acc = [s["final_accuracy"] for s in runs]
        memory = ", ".join(f"{m['total_bytes'] / 1024:.0f}" for m in runs[0]["memory_per_process"])
        print(f"| {name} | {runs[0]['world_size']} | {speed:,.0f} ({min(speeds):,.0f}–{max(speeds):,.0f}) | {speed / base:.2f}× | "
              f"{min(acc):.4f}–{max(acc):.4f} | {memory} |")
    print()
    print("memory per process, bytes (first round):")
    for name in names:
        if results[name]:
            print(f"- {name}: " + json.dumps(results[name][0]["memory_per_process"]))


if __name__ == "__main__":
    main()
