"""`scaletrain calibrate`: measure the GPU this process runs on (products, attention, memory-bound
kernels, launches, whole layers in a step: `plan/cluster/calibrate.py`, about a minute), write a
profile of it that `scaletrain plan --hardware FILE` reads, and say how it compares with the
built-in profile of that GPU.

    scaletrain calibrate --out my-h100.toml
    scaletrain plan --hardware my-h100.toml --model-config llama3-8b --gpus 8 --choose
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..foundation.errors import UsageError

NAME = "calibrate"
HELP = ("measure this GPU's kernels (about a minute) and write a hardware profile of it for "
        "`scaletrain plan --hardware FILE`, compared with the built-in profile of that GPU")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, metavar="FILE.toml",
                   help="the profile to write (and its measurements beside it, FILE.json; default: "
                        "./<built-in profile>-calibrated.toml)")
    p.add_argument("--hardware", metavar="NAME|FILE",
                   help="the built-in profile whose datasheet figures and links the new one keeps, and that it is "
                        "compared with (default: the one whose cuda_names holds this GPU's name)")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny shapes on the CPU: checks the command and writes a profile, measures nothing of a GPU")


def run(args: argparse.Namespace) -> int:
    import torch

    from ..hardware import profile_here
    from ..plan.cluster.calibrate import measure, summary

    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        raise UsageError("scaletrain calibrate measures a CUDA GPU and this machine has none visible; run it on the "
                         "GPU machine, or give --dry-run to check the command here")
    if args.out is not None and args.out.suffix != ".toml":
        raise UsageError(f"--out {args.out}: a profile is a .toml file; give --out {args.out.with_suffix('.toml')}")
    base = profile_here(args.hardware, dry)
    out = args.out or Path(f"{base.name}-calibrated.toml")
    say = (lambda text: print(text, flush=True))
    say(f"calibrating {'the CPU (dry run: tiny shapes)' if dry else torch.cuda.get_device_name()} against the "
        f"built-in profile {base.name} ...")
    result = measure(dry, say)
    summary(result, say)
    show_written(result, base, out)
    return 0


def show_written(result: dict, base, out: Path) -> None:
    from ..hardware.user_profile import comparison, write_profile

    written = write_profile(base, result, out)
    print(f"written: {written} (profile) and {written.with_suffix('.json')} (measurements), in "
          f"{result['seconds']:.0f} s")
    print(f"this GPU against the built-in profile {base.name} ({base.basis}):")
    for what, mine, theirs in comparison(written, base):
        print(f"  {what}: {mine:,.1f} here, {theirs:,.1f} in {base.name} ({mine / theirs - 1:+.0%})")
    print(f"use it: scaletrain plan --hardware {written} --model-config llama3-8b --gpus 8 --choose",
          file=sys.stdout)
