"""The CPU memory allocator, by measurement: speed and peak memory of glibc's malloc (as it comes),
glibc's with its mmap threshold fixed (`--steady-memory`), tcmalloc and jemalloc, on every built-in
workload, the byte-level GPT and a 134 MB MLP, under single, ddp × 2 and fsdp × 2.

    python benchmarks/allocator_check.py [--reps 3] [--lock /tmp/scaletrain-cpu.lock] [--out table.md]

Each (workload, configuration) is one group: its variants run one after the other, in a new
order each repetition (forwards, then backwards), so that a change in the machine's load
touches every variant alike; with `--lock FILE` each group holds that lock (flock) while it
runs, and others' jobs can run between groups. A run is `scaletrain train --allocator NAME
--max-steps K`; its speed is the median samples/s of its step records after the first (the
warm-up), its memory the largest process's training peak above that process's baseline
(summary.json). The table gives, per variant, the median over the repetitions and, for the
speed, the median of the per-repetition ratios to glibc's in the same repetition.
Runs from benchmarks/ (the MLP is `--model memory_models:mlp134`). Needs libtcmalloc-minimal4
and libjemalloc2 (Debian).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

from teardown import held  # noqa: E402 (benchmarks/teardown.py: the shared CPU lock, taken the same way)

#: name -> (flags, steps, log every): steps enough for a few seconds of training on 2 cores.
WORKLOADS = {
    "digits-cnn": (["--workload", "digits-cnn"], 300, 20),
    "digits-mlp": (["--workload", "digits-mlp"], 400, 20),
    "synthetic-cnn": (["--workload", "synthetic-cnn"], 60, 5),
    "synthetic-mlp": (["--workload", "synthetic-mlp"], 40, 5),
    "stdlib-gpt": (["--workload", "stdlib-gpt"], 40, 5),
    "mlp134": (["--workload", "synthetic-mlp", "--model", "memory_models:mlp134"], 12, 2),
}
CONFIGURATIONS = {"single": ("single", 1), "ddp ×2": ("ddp", 2), "fsdp ×2": ("fsdp", 2)}
VARIANTS = {
    "glibc": ["--allocator", "glibc"],
    "glibc, steady memory": ["--allocator", "glibc", "--steady-memory"],
    "tcmalloc": ["--allocator", "tcmalloc"],
    "jemalloc": ["--allocator", "jemalloc"],
}


def run_once(workload: str, configuration: str, variant: str, folder: Path, timeout: float) -> dict:
    flags, steps, every = WORKLOADS[workload]
    strategy, nproc = CONFIGURATIONS[configuration]
    argv = [sys.executable, "-m", "scaletrain", "train", *flags, "--strategy", strategy, "--nproc-per-node",
            str(nproc), "--max-steps", str(steps), "--log-every-steps", str(every), "--out", str(folder),
            *VARIANTS[variant]]
    done = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} failed:\n{done.stdout[-1500:]}\n{done.stderr[-2500:]}")
    summary = json.loads((folder / "summary.json").read_text())
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rates = [r["samples_per_second"] for r in records if r.get("kind") == "step"][1:]
    peaks, bases = summary["peak_memory_bytes"], summary["baseline_memory_bytes"]
    return {"samples_per_s": statistics.median(rates), "peak_above_baseline": max(p - b for p, b in zip(peaks, bases)),
            "peak": max(peaks), "allocator": summary.get("allocator")}


def measure_group(workload: str, configuration: str, reps: int, folder: Path, timeout: float) -> dict:
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    order = list(VARIANTS)
    for rep in range(reps):
        for variant in (order if rep % 2 == 0 else order[::-1]):
            out = folder / f"{workload}-{configuration.replace(' ', '')}-{variant.replace(', ', '-')}-{rep}"
            runs[variant].append(run_once(workload, configuration, variant, out, timeout))
    return runs


def summarise(runs: dict) -> dict:
    base = runs["glibc"]
    found = {}
    for variant, values in runs.items():
        ratios = [v["samples_per_s"] / b["samples_per_s"] for v, b in zip(values, base)]
        found[variant] = {"samples_per_s": statistics.median(v["samples_per_s"] for v in values),
                          "speed_vs_glibc": statistics.median(ratios), "speed_ratios": ratios,
                          "peak_above_baseline_mb": statistics.median(v["peak_above_baseline"] for v in values) / 1e6,
                          "peak_mb": statistics.median(v["peak"] for v in values) / 1e6,
                          "ran": sorted({v["allocator"] for v in values})}
    return found


def table(results: dict) -> list[str]:
    head = "| workload | configuration | " + " | ".join(f"{v}: samples/s (× glibc) | {v}: peak above baseline MB"
                                                    for v in VARIANTS) + " |"
    rows = [head, "|---|---|" + "---:|---:|" * len(VARIANTS)]
    for (workload, configuration), found in results.items():
        cells = []
        for variant in VARIANTS:
            f = found[variant]
            cells += [f"{f['samples_per_s']:,.0f} ({f['speed_vs_glibc']:.2f}×)", f"{f['peak_above_baseline_mb']:,.0f}"]
        rows.append(f"| {workload} | {configuration} | " + " | ".join(cells) + " |")
    return rows


def verdict(results: dict) -> list[str]:
    lines = []
    for variant in VARIANTS:
        if variant == "glibc":
            continue
        speeds = [found[variant]["speed_vs_glibc"] for found in results.values()]
        memory = [found[variant]["peak_above_baseline_mb"] / max(found["glibc"]["peak_above_baseline_mb"], 1e-9)
                  for found in results.values()]
        lines.append(f"{variant}: speed × glibc median {statistics.median(speeds):.2f} (lowest {min(speeds):.2f}, "
                     f"{sum(s >= 1.0 for s in speeds)} of {len(speeds)} at least as fast); peak above baseline × glibc "
                     f"median {statistics.median(memory):.2f} (highest {max(memory):.2f})")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--configurations", default=",".join(CONFIGURATIONS))
    p.add_argument("--reps", type=int, default=3, help="runs of each variant in each group (default 3)")
    p.add_argument("--lock", type=Path, help="hold this lock (flock) while each group runs")
    p.add_argument("--timeout", type=float, default=600, help="seconds a run may take (default 600)")
    p.add_argument("--out", type=Path, help="also write the Markdown table here")
    p.add_argument("--json", type=Path, help="also write every run's figures here")
    p.add_argument("--resume", type=Path, metavar="JSON",
                   help="take the groups a --json file of an earlier run holds from it, and measure only the others")
    args = p.parse_args(argv)
    started = time.time()
    results, raw = {}, {}
    earlier = json.loads(args.resume.read_text()) if args.resume else {}
    with tempfile.TemporaryDirectory(prefix="scaletrain-allocator-") as tmp:
        for workload in [w for w in args.workloads.split(",") if w]:
            for configuration in [c for c in args.configurations.split(",") if c]:
                key = f"{workload} / {configuration}"
                if key in earlier:
                    runs = earlier[key]
                else:
                    with held(args.lock):
                        runs = measure_group(workload, configuration, args.reps, Path(tmp), args.timeout)
                raw[key] = runs
                results[(workload, configuration)] = summarise(runs)
                print(table({(workload, configuration): results[(workload, configuration)]})[-1], flush=True)
                if args.json:  # as it goes: a long run interrupted keeps what it measured
                    args.json.write_text(json.dumps(raw, indent=1))
    lines = [*table(results), "", *verdict(results),
             f"{len(results)} groups × {len(VARIANTS)} variants × {args.reps} runs; "
             f"{(time.time() - started) / 60:.1f} min; cores: {os.cpu_count()}"]
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
