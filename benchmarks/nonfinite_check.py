"""What noticing NaN/inf costs the training loop: the per-step comparison on the device and
the check every --log-every-steps steps, against the training step itself.

    python benchmarks/nonfinite_check.py [--width 1024] [--steps 200] [--rounds 7]

One process, the `single` strategy on this machine's CPU (or CUDA when visible), an MLP of
`--width`: in each round, `--steps` plain train steps are timed, then as many with the
guard's per-step tracking and a check every LOG_EVERY_STEPS steps, alternating so that
drift of the machine hits both alike. Printed: medians over the rounds, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's scaletrain, run from anywhere

import scaletrain  # noqa: E402
from scaletrain.foundation.defaults import LOG_EVERY_STEPS  # noqa: E402
from scaletrain.train.finite import NonFiniteGuard  # noqa: E402


def timed_steps(run, model, optimizer, batch, steps: int, guard=None) -> float:
    inputs, targets = batch
    start = time.perf_counter()
    for _ in range(steps):
        loss = run.train_step(model, optimizer, inputs, targets, F.cross_entropy)
        if guard is not None:
            guard.track(loss, run.steps_taken)
            if guard.due(run.steps_taken):
                guard.check(run.steps_taken)
    if run.device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    with scaletrain.init("single") as run:
        model = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                              nn.ReLU(), nn.Linear(args.width, 10))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        model, optimizer = run.setup(model, optimizer)
        batch = (torch.randn(args.batch_size, args.width, device=run.device),
                 torch.randint(0, 10, (args.batch_size,), device=run.device))
        guard = NonFiniteGuard(run, model, LOG_EVERY_STEPS, keep_going=False, lr=1e-4, first_step=0,
                               say=print)
        timed_steps(run, model, optimizer, batch, 20, guard)  # warm-up
        plain, guarded = [], []
        for _ in range(args.rounds):
            plain.append(timed_steps(run, model, optimizer, batch, args.steps))
            guarded.append(timed_steps(run, model, optimizer, batch, args.steps, guard))
        parameters = sum(p.numel() for p in model.parameters())
        a, b = statistics.median(plain), statistics.median(guarded)
        print(f"device {run.device}, {parameters / 1e6:.2f} M parameters, batch {args.batch_size}, check every "
              f"{LOG_EVERY_STEPS} steps, {args.rounds} rounds of {args.steps} steps (medians)")
        print(f"train step alone          {a * 1e3:8.3f} ms")
        print(f"train step + NaN/inf guard {b * 1e3:8.3f} ms")
        print(f"ratio guarded / plain      {b / a:8.3f}")


if __name__ == "__main__":
    main()
