"""Measure what one GPU really does on a transformer's kernels, for `scaletrain plan --hardware`:
the measurements of `scaletrain calibrate` (scaletrain/plan/cluster/calibrate.py: products,
attention at head sizes 64 and 128, memory-bound kernels, launches, whole layers in a step),
written as a calibration file for a built-in profile.

It writes DIR/<profile>.json (`h200.json` on an H200: the name of the profile whose
cuda_names holds this GPU, else gpu.json) with the GPU's name and torch's version; commit it
as scaletrain/hardware/calibrations/<profile>.json and the profile reads it. A user's own GPU
is better served by `scaletrain calibrate`, which writes a whole profile. About 60 s on an H100
or H200. `--dry-run` runs the same code with tiny shapes on the CPU (a test does).

    python benchmarks/calibrate_gpu.py --out runs/calibration
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder the calibration file is written to")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU: checks the script, measures nothing")
    args = p.parse_args(argv)
    import torch

    from scaletrain.hardware import for_device_name
    from scaletrain.plan.cluster.calibrate import measure, summary

    dry = args.dry_run or not torch.cuda.is_available()
    if dry and not args.dry_run:
        print("calibrate_gpu: no CUDA device here; running the CPU dry run (tiny shapes) instead")
    result = measure(dry, lambda text: print(text, flush=True))
    profile, _ = (None, "") if dry else for_device_name(result["gpu_name"])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{profile.name if profile else 'gpu'}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    summary(result)
    print(f"calibration of {result['gpu_name']} written to {path} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
