"""How much memory rank 0 needs to write a checkpoint of an fsdp model, full vs sharded.

    python benchmarks/checkpoint_memory.py [--width 4096] [--nproc 2]

Each layout is saved by a fresh torchrun job of `--nproc` processes (tests/workers/
sharded_worker.py): 3 training steps, then rank 0 resets its peak resident memory
(/proc/self/clear_refs) and saves; the figure is the rise of the peak above the resident
memory just before the save. The full layout gathers the whole model and optimizer state
onto rank 0; the sharded layout has every rank write its own share.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "workers" / "sharded_worker.py"


def measure(layout: str, width: int, nproc: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="scaletrain-ckpt-mem-") as tmp:
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                               str(nproc), str(WORKER), "save", tmp, "--width", str(width), "--layout", layout],
                              capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise SystemExit(f"the {layout} save failed:\n{done.stderr[-3000:]}")
        line = next(l for l in done.stdout.splitlines() if l.startswith("MEMORY "))
        return json.loads(line[len("MEMORY "):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=4096, help="hidden width of the MLP (parameters ≈ width²)")
    p.add_argument("--nproc", type=int, default=2)
    args = p.parse_args()
    rows = [measure(layout, args.width, args.nproc) for layout in ("full", "sharded")]
    state = rows[0]["state_bytes"]
    print(f"fsdp on {args.nproc} processes, MLP width {args.width}: model + Adam state {state / 1e6:,.0f} MB "
          f"({state / 3 / 4 / 1e6:.1f} M parameters)")
    print("| layout | rank 0's peak memory rise during the save | share of one full copy |")
    print("|---|---:|---:|")
    for row in rows:
        print(f"| {row['layout']} | {row['peak_increase_bytes'] / 1e6:,.0f} MB | "
              f"{row['peak_increase_bytes'] / state:.0%} |")


if __name__ == "__main__":
    main()
