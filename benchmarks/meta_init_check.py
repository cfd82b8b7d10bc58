"""A model whose parameters alone exceed one process's memory budget: the ordinary build fails
on the budget, fsdp with meta-device initialisation trains it on enough processes.

    flock /tmp/scaletrain-bench.lock python benchmarks/meta_init_check.py [--blocks 24] [--width 3072] [--nproc 8]

The model is `memory_models:deep_mlp` (blocks of width × width: 24 × 3072² is 906 MB of fp32
parameters; a block's weight above 32 MB, so that glibc returns FSDP's gathered blocks to the
system when they are freed — see docs/memory.md). The budget is a per-process data limit (`ulimit -d`, RLIMIT_DATA: a process's
allocations past it fail with torch's "DefaultCPUAllocator: can't allocate memory"), set the
same for every process of both runs:

1. fsdp on --nproc processes with meta-device initialisation, without a limit, to see what each
   process needs (its data segment at the end, `data_segment_bytes` in summary.json); the budget
   is that plus --headroom (default 10%); the script checks that it is smaller than one process's
   data segment before any model plus the parameters alone;
2. one process under the budget, built the ordinary way (`--strategy single --meta-init never`):
   it must fail, in one line;
3. fsdp on --nproc processes under the budget, with meta-device initialisation: it must train.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def train(args, out: Path, extra: list[str], limit_kib: int | None, env: dict) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "scaletrain", "train", "--workload", "synthetic-mlp", "--model",
            "memory_models:deep_mlp", "--batch-size", "8", "--max-steps", str(args.steps), "--out", str(out), *extra]
    if limit_kib is not None:
        argv = ["bash", "-c", f'ulimit -d {limit_kib} && exec "$@"', "ulimit", *argv]
    return subprocess.run(argv, cwd=HERE, env=env, capture_output=True, text=True, timeout=args.timeout)


def baseline_data_segment(env: dict) -> int:
    """One initialised process's data segment before any model (bytes)."""
    code = ("import re, scaletrain; run = scaletrain.init('single', environ={}); "
            "print(re.search(r'VmData:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout.split()[-1]) * 1024


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, default=24)
    p.add_argument("--width", type=int, default=3072)
    p.add_argument("--compare-blocks", type=int, default=16,
                   help="blocks of the model one process and fsdp ×2 both train, to compare their peaks (default 16)")
    p.add_argument("--nproc", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--headroom", type=float, default=0.10)
    p.add_argument("--timeout", type=float, default=900)
    args = p.parse_args(argv)
    env = {**os.environ, "SCALETRAIN_BIG_BLOCKS": str(args.blocks), "SCALETRAIN_BIG_WIDTH": str(args.width),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    params = (args.blocks * (args.width * args.width + args.width) + 3 * 32 * 32 * args.width + args.width
              + args.width * 10 + 10) * 4
    with tempfile.TemporaryDirectory(prefix="scaletrain-meta-") as tmp:
        sharded = ["--strategy", "fsdp", "--nproc-per-node", str(args.nproc), "--meta-init", "always"]
        free = train(args, Path(tmp) / "free", sharded, None, env)
        if free.returncode != 0:
            print(free.stdout[-2000:], free.stderr[-3000:])
            return 1
        summary = json.loads((Path(tmp) / "free" / "summary.json").read_text())
        needed = max(summary["data_segment_bytes"])
        budget = int(needed * (1 + args.headroom))
        before = baseline_data_segment(env)
        print(f"model: {args.blocks} blocks of {args.width}², {params / 1e6:,.0f} MB of parameters")
        print(f"one process before any model: {before / 1e6:,.0f} MB of data segment; fsdp ×{args.nproc} with "
              f"meta-device initialisation needed {needed / 1e6:,.0f} MB per process (peak resident "
              f"{max(summary['peak_memory_bytes']) / 1e6:,.0f} MB)")
        print(f"budget: {budget / 1e6:,.0f} MB per process (ulimit -d {budget // 1024}); the parameters alone need "
              f"{(before + params) / 1e6:,.0f} MB in one process")
        if budget >= before + params:
            print("the budget is not below what the parameters alone need: use more --blocks or --nproc")
            return 1
        ordinary = train(args, Path(tmp) / "ordinary", ["--strategy", "single", "--meta-init", "never"],
                         budget // 1024, env)
        line = (ordinary.stderr.strip().splitlines() or [""])[-1]
        print(f"single, ordinary build, under the budget: exit {ordinary.returncode}: {line}")
        limited = train(args, Path(tmp) / "limited", sharded, budget // 1024, env)
        ok = limited.returncode == 0
        result = json.loads((Path(tmp) / "limited" / "summary.json").read_text()) if ok else {}
        print(f"fsdp ×{args.nproc}, meta-device initialisation, under the budget: exit {limited.returncode}"
              + (f", held-out loss {result.get('final_loss'):.4f}, peak resident "
                 f"{max(result['peak_memory_bytes']) / 1e6:,.0f} MB per process" if ok else
                 f": {(limited.stderr.strip().splitlines() or [''])[-1]}"))
        ratio = compare(args, Path(tmp), env)
        return 0 if ordinary.returncode != 0 and ok and "does not fit" in line and ratio <= 0.6 else 1


def compare(args, folder: Path, env: dict) -> float:
    """fsdp ×2 with meta-device initialisation against one process, the same model and batch:
    each one's peak above its baseline."""
    env = {**env, "SCALETRAIN_BIG_BLOCKS": str(args.compare_blocks)}
    above = {}
    for name, extra in (("single", ["--strategy", "single", "--meta-init", "never"]),
                        ("fsdp", ["--strategy", "fsdp", "--nproc-per-node", "2", "--meta-init", "always"])):
        done = train(args, folder / f"compare-{name}", extra, None, env)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-3000:])
            return float("inf")
        summary = json.loads((folder / f"compare-{name}" / "summary.json").read_text())
        above[name] = max(p - b for p, b in zip(summary["peak_memory_bytes"], summary["baseline_memory_bytes"]))
    ratio = above["fsdp"] / above["single"]
    print(f"{args.compare_blocks} blocks of {args.width}²: peak above baseline {above['single'] / 1e6:,.0f} MB in one "
          f"process, {above['fsdp'] / 1e6:,.0f} MB per process under fsdp ×2 with meta-device initialisation: "
          f"{ratio:.0%}")
    return ratio


if __name__ == "__main__":
    sys.exit(main())
