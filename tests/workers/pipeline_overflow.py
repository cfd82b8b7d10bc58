"""Run under torchrun with 2 processes: a 2-stage pipeline under fp16 whose first stage alone
gets an infinite gradient at step 2. Each stage prints `STAGE {json}` (rank 0 prints both): the steps it skipped
(its parameters did not move), whether its own gradients held the overflow, and the loss
scale after every step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from strategy_reference import batches, optimizer_for, tiny_model  # noqa: E402

OVERFLOW_AT = 2


def main() -> None:
    with scaletrain.init(strategy="pipeline", precision="fp16", microbatches=2) as run:
        model = tiny_model()
        model, optimizer = run.setup(model, optimizer_for(model))
        stage = run.unwrap(model)
        first = next(iter(stage.parameters()))
        poisoned = {"step": None}

        def poison(grad):  # an overflow on this stage only, at one step
            return torch.full_like(grad, float("inf")) if poisoned["step"] == OVERFLOW_AT else grad

        if run.rank == 0:
            first.register_hook(poison)
        skipped, scales, own_overflow = [], [], False
        for step, (inputs, targets) in enumerate(batches(4), start=1):
            poisoned["step"] = step
            before = [p.detach().clone() for p in stage.parameters()]
            run.train_step(model, optimizer, inputs[:4], targets[:4])
            if all(torch.equal(a, b) for a, b in zip(before, stage.parameters())):
                skipped.append(step)
            if step == OVERFLOW_AT:
                own_overflow = any(not torch.isfinite(p.grad).all() for p in stage.parameters() if p.grad is not None)
            scales.append(run.scaler.state_dict()["scale"])
        report = {"stage": run.rank, "skipped": skipped, "scales": scales, "overflowed_here": own_overflow}
        every = [None] * run.world_size
        dist.all_gather_object(every, report)
        for one in every if run.rank == 0 else []:
            print("STAGE " + json.dumps(one), flush=True)


if __name__ == "__main__":
    main()
