"""The CPU memory allocator, by measurement: speed and peak memory of glibc's malloc (as it comes),
glibc's with its mmap threshold fixed (`--steady-memory`), tcmalloc, jemalloc and mimalloc (the
`cmeel-mimalloc` wheel scaletrain depends on), on every built-in workload, the byte-level GPT and a
134 MB MLP.

    python benchmarks/allocator_check.py [--reps 3] [--lock /tmp/scaletrain-cpu.lock] [--out table.md]
    python benchmarks/allocator_check.py --groups "mlp134/fsdp ×2,mlp134/single" \
        --variants "glibc,mimalloc,mimalloc (purge 1 s)"      # mimalloc's options against its default's

By default the groups are the built-in workloads under ddp × 2 and the 134 MB MLP (batch 16) under
fsdp × 2 and on one process (`--groups all`: every workload under single, ddp × 2 and fsdp × 2);
the variants glibc, tcmalloc and mimalloc as `--allocator auto` runs it (`--variants all`: every
one below, mimalloc's options included). Each (workload, configuration) is one group: its
variants run one after the other, in a new order each repetition (forwards, then backwards), so
that a change in the machine's load touches every variant alike; with `--lock FILE` each group
holds that lock (flock) while it runs, and others' jobs can run between groups. A run is
`scaletrain train --allocator NAME --max-steps K` (a variant's allocator options in its
environment); its speed is the median samples/s of its step records after the first (the
warm-up), its memory the largest process's training peak above that process's baseline
(summary.json). The table gives, per variant, the median over the repetitions and, for the
speed, the median of the per-repetition ratios to glibc's in the same repetition; the FSDP row
of the MLP also its peak as a share of one process's (the floor is 0.68: docs/memory.md).
Runs from benchmarks/ (the MLP is `--model memory_models:mlp134`). tcmalloc and jemalloc need
libtcmalloc-minimal4 and libjemalloc2 (Debian); a variant not installed is left out, said once.
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
    # A user's 134 MB MLP at batch 16: FSDP's memory against one process's.
    "mlp134": (["--workload", "synthetic-mlp", "--model", "memory_models:mlp134", "--batch-size", "16"], 8, 1),
}
CONFIGURATIONS = {"single": ("single", 1), "ddp ×2": ("ddp", 2), "fsdp ×2": ("fsdp", 2)}
#: The groups measured by default: what a default must hold on (speed under ddp × 2 on every
#: built-in workload; FSDP's memory against one process's on the MLP).
DEFAULT_GROUPS = [*(f"{w}/ddp ×2" for w in WORKLOADS if w != "mlp134"), "mlp134/fsdp ×2", "mlp134/single"]
#: name -> (flags, environment).
VARIANTS = {
    "glibc": (["--allocator", "glibc"], {}),
    "glibc (steady memory)": (["--allocator", "glibc", "--steady-memory"], {}),
    "tcmalloc": (["--allocator", "tcmalloc"], {}),
    "jemalloc": (["--allocator", "jemalloc"], {}),
    "mimalloc": (["--allocator", "mimalloc"], {}),
    # mimalloc's own default: freed memory returned after 1 s (scaletrain's: at once).
    "mimalloc (purge 1 s)": (["--allocator", "mimalloc"], {"MIMALLOC_PURGE_DELAY": "1000"}),
    "mimalloc (purge 10 ms)": (["--allocator", "mimalloc"], {"MIMALLOC_PURGE_DELAY": "10"}),
    "mimalloc (purge 100 ms)": (["--allocator", "mimalloc"], {"MIMALLOC_PURGE_DELAY": "100"}),
}
DEFAULT_VARIANTS = ["glibc", "tcmalloc", "mimalloc"]


def run_once(workload: str, configuration: str, variant: str, folder: Path, timeout: float) -> dict:
    flags, steps, every = WORKLOADS[workload]
    strategy, nproc = CONFIGURATIONS[configuration]
    variant_flags, variant_env = VARIANTS[variant]
    argv = [sys.executable, "-m", "scaletrain", "train", *flags, "--strategy", strategy, "--nproc-per-node",
            str(nproc), "--max-steps", str(steps), "--log-every-steps", str(every), "--out", str(folder),
            *variant_flags]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    done = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, timeout=timeout, env={**env, **variant_env})
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} failed:\n{done.stdout[-1500:]}\n{done.stderr[-2500:]}")
    summary = json.loads((folder / "summary.json").read_text())
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rates = [r["samples_per_second"] for r in records if r.get("kind") == "step"][1:]
    peaks, bases = summary["peak_memory_bytes"], summary["baseline_memory_bytes"]
    return {"samples_per_s": statistics.median(rates), "peak_above_baseline": max(p - b for p, b in zip(peaks, bases)),
            "peak": max(peaks), "allocator": summary.get("allocator")}


def measure_group(workload: str, configuration: str, variants: list, reps: int, folder: Path, timeout: float) -> dict:
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    order = list(variants)
    for rep in range(reps):
        for variant in (order if rep % 2 == 0 else order[::-1]):
            out = folder / f"{workload}-{configuration.replace(' ', '')}-{variant.replace(' ', '').replace('(', '-').replace(')', '')}-{rep}"
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


def table(results: dict, variants: list) -> list[str]:
    head = "| workload | configuration | " + " | ".join(f"{v}: samples/s (× glibc) | {v}: peak above baseline MB"
                                                    for v in variants) + " |"
    rows = [head, "|---|---|" + "---:|---:|" * len(variants)]
    for (workload, configuration), found in results.items():
        cells = []
        for variant in variants:
            f = found[variant]
            cells += [f"{f['samples_per_s']:,.0f} ({f['speed_vs_glibc']:.2f}×)", f"{f['peak_above_baseline_mb']:,.0f}"]
        rows.append(f"| {workload} | {configuration} | " + " | ".join(cells) + " |")
    return rows


def verdict(results: dict, variants: list) -> list[str]:
    lines = []
    for variant in variants:
        if variant == "glibc":
            continue
        speeds = [found[variant]["speed_vs_glibc"] for found in results.values()]
        memory = [found[variant]["peak_above_baseline_mb"] / max(found["glibc"]["peak_above_baseline_mb"], 1e-9)
                  for found in results.values()]
        lines.append(f"{variant}: speed × glibc median {statistics.median(speeds):.2f} (lowest {min(speeds):.2f}, "
                     f"{sum(s >= 1.0 for s in speeds)} of {len(speeds)} at least as fast); peak above baseline × glibc "
                     f"median {statistics.median(memory):.2f} (highest {max(memory):.2f})")
    fsdp, single = results.get(("mlp134", "fsdp ×2")), results.get(("mlp134", "single"))
    if fsdp and single:  # FSDP's memory as a share of one process's: the floor on this model is 0.68
        shares = ", ".join(f"{v} {fsdp[v]['peak_above_baseline_mb'] / single[v]['peak_above_baseline_mb']:.2f}×"
                           for v in variants)
        lines.append(f"mlp134, fsdp × 2's peak above baseline as a share of one process's: {shares}")
    return lines


def installed(variants: list) -> list:
    """The variants whose allocator is installed here (glibc's always is)."""
    from scaletrain.memory import allocator

    kept = [v for v in variants if VARIANTS[v][0][1] not in allocator.LIBRARIES or allocator.find(VARIANTS[v][0][1])]
    for v in variants:
        if v not in kept:
            print(f"left out {v}: not installed here ({allocator.install_line(VARIANTS[v][0][1])})", flush=True)
    return kept


def chosen(text: str, every: list, default: list, what: str) -> list:
    names = every if text == "all" else default if not text else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in every]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)}; choose from {', '.join(every)}")
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", default="", help="WORKLOAD/CONFIGURATION,... (default: the built-in workloads under "
                                                "ddp ×2, the MLP under fsdp ×2 and single; all: every pair)")
    p.add_argument("--variants", default="", help=f"comma-separated (default: {', '.join(DEFAULT_VARIANTS)}; all: "
                                                  f"{', '.join(VARIANTS)}); glibc is always measured")
    p.add_argument("--reps", type=int, default=3, help="runs of each variant in each group (default 3)")
    p.add_argument("--lock", type=Path, help="hold this lock (flock) while each group runs")
    p.add_argument("--timeout", type=float, default=600, help="seconds a run may take (default 600)")
    p.add_argument("--out", type=Path, help="also write the Markdown table here")
    p.add_argument("--json", type=Path, help="also write every run's figures here")
    p.add_argument("--resume", type=Path, metavar="JSON",
                   help="take the groups a --json file of an earlier run holds from it, and measure only the others")
    args = p.parse_args(argv)
    every_group = [f"{w}/{c}" for w in WORKLOADS for c in CONFIGURATIONS]
    groups = [tuple(g.split("/", 1)) for g in chosen(args.groups.replace(", ", ","), every_group, DEFAULT_GROUPS,
                                                     "groups")]
    variants = installed(["glibc", *(v for v in chosen(args.variants, list(VARIANTS), DEFAULT_VARIANTS, "variants")
                                     if v != "glibc")])
    started = time.time()
    results, raw = {}, {}
    earlier = json.loads(args.resume.read_text()) if args.resume else {}
    with tempfile.TemporaryDirectory(prefix="scaletrain-allocator-") as tmp:
        for workload, configuration in groups:
            key = f"{workload} / {configuration}"
            runs = {v: r for v, r in earlier.get(key, {}).items() if v in variants}
            if set(runs) != set(variants):
                with held(args.lock):
                    runs = measure_group(workload, configuration, variants, args.reps, Path(tmp), args.timeout)
            raw[key] = runs
            results[(workload, configuration)] = summarise(runs)
            print(table({(workload, configuration): results[(workload, configuration)]}, variants)[-1], flush=True)
            if args.json:  # as it goes: a long run interrupted keeps what it measured
                args.json.write_text(json.dumps(raw, indent=1))
    lines = [*table(results, variants), "", *verdict(results, variants),
             f"{len(results)} groups × {len(variants)} variants × {args.reps} runs; "
             f"{(time.time() - started) / 60:.1f} min; cores: {os.cpu_count()}"]
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
