"""Save at step K, then resume in a new job: for every strategy, the resumed run must end
with exactly the parameters of the uninterrupted one.

    python resume_worker.py one-process  first|second DIR     # single, dp, mp
    torchrun --nproc-per-node 2 resume_worker.py multi first|second DIR   # ddp, hybrid, pipeline, fsdp

first: trains STEPS steps of every configuration, saving a checkpoint at step SAVE_AT into
DIR/<name>/checkpoints, and its final state into DIR/<name>/first (a full checkpoint).
second: scrambles the weights, resumes from that checkpoint, trains to STEPS and saves its
final state into DIR/<name>/second. Gradient accumulation is on in some configurations: the
checkpoint then falls between optimizer steps only, as the trainer takes it. One saves
asynchronously (written while the next steps train).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

import scaletrain

STEPS, SAVE_AT = 8, 4
ONE_PROCESS = [("single", {}), ("dp", {}), ("mp", {"microbatches": 2}), ("single", {"grad_accum": 2})]
MULTI = [("ddp", {}), ("hybrid", {"devices_per_process": 2}), ("pipeline", {"microbatches": 2}),
         ("pipeline", {"pipeline_stages": 1, "microbatches": 2}), ("fsdp", {}),
         ("fsdp", {"checkpoint_layout": "sharded"}), ("ddp", {"grad_accum": 2, "checkpoint_layout": "sharded"}),
         ("pipeline", {"microbatches": 2, "checkpoint_layout": "sharded"}), ("ddp", {"checkpoint_async": True})]


def model() -> nn.Sequential:
    return nn.Sequential(OrderedDict(
        fc1=nn.Sequential(nn.Flatten(), nn.Linear(16, 24), nn.Tanh()),
        fc2=nn.Sequential(nn.Linear(24, 24), nn.Tanh()),
        fc3=nn.Linear(24, 5),
    ))


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(5)
    return TensorDataset(torch.randn(96, 4, 4, generator=gen), torch.randint(0, 5, (96,), generator=gen))


def name_of(strategy: str, options: dict) -> str:
    return "-".join([strategy, *(f"{k}={v}" for k, v in sorted(options.items()))])


def one(strategy: str, options: dict, phase: str, root: Path) -> None:
    options = dict(options)
    layout = options.pop("checkpoint_layout", "auto")
    asynchronous = options.pop("checkpoint_async", False)
    folder = root / name_of(strategy, {**options, "layout": layout, **({"async": True} if asynchronous else {})})
    with scaletrain.init(strategy=strategy, seed=0, **options) as run:
        net = model()
        if phase == "second":  # the weights must come from the checkpoint
            with torch.no_grad():
                for p in net.parameters():
                    p.add_(1.0)
        optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        net, optimizer = run.setup(net, optimizer)
        loader = run.loader(data(), batch_size=8, shuffle=True)
        ckpt = run.checkpointer(folder / "checkpoints", layout=layout, asynchronous=asynchronous)
        if phase == "second":
            resumed = ckpt.load("auto", net, optimizer, scheduler=scheduler, loader=loader)
            assert resumed is not None and resumed["step"] == SAVE_AT, resumed
        while run.steps_taken < STEPS:
            for batch in loader:
                run.train_step(net, optimizer, batch)
                if run.accumulation_position()[0] == 0:
                    scheduler.step()
                if phase == "first" and run.steps_taken == SAVE_AT:
                    ckpt.save(run.steps_taken, net, optimizer, scheduler=scheduler, loader=loader)
                if run.steps_taken == STEPS:
                    break
        final = run.checkpointer(folder / phase, layout="full")
        final.save(run.steps_taken, net, optimizer)


def main() -> None:
    kind, phase, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if kind == "multi":
        dist.init_process_group("gloo")  # shared by every scaletrain.init below
    for strategy, options in (MULTI if kind == "multi" else ONE_PROCESS):
        one(strategy, options, phase, root)
    if kind == "multi":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
