"""Asynchronous checkpoints of an fsdp model (sharded layout, DCP's asynchronous save), as
the jobs of tests/test_checkpoint_async.py. Under torchrun, 2 processes:

    async_checkpoint_worker.py whole DIR    # 6 steps, async saves at 2, 4, 6; exits while 6 is written
    async_checkpoint_worker.py die DIR      # the same, but rank 1 dies (SIGKILL) while writing step 4
    async_checkpoint_worker.py resume DIR   # resumes DIR's newest complete checkpoint, trains to step 6

`whole` and `resume` print IN_FLIGHT_AT_EXIT True/False: whether the last save was still
being written when the program left its `with` block (which must finish it).
"""

from __future__ import annotations

import os
import signal
import sys
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import scaletrain

STEPS, EVERY = 6, 2


def model() -> nn.Sequential:
    return nn.Sequential(OrderedDict(
        fc1=nn.Sequential(nn.Linear(32, 256), nn.Tanh()),
        fc2=nn.Sequential(nn.Linear(256, 256), nn.Tanh()),
        fc3=nn.Linear(256, 5),
    ))


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(7)
    return TensorDataset(torch.randn(128, 32, generator=gen), torch.randint(0, 5, (128,), generator=gen))


def die_when_writing() -> None:
    """From now on, this process is killed the moment DCP's writing thread starts writing
    its share of a checkpoint (as a machine lost in the middle of a save)."""
    import torch.distributed.checkpoint.filesystem as fs

    real = fs._write_item

    def write_then_die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    fs._write_item = write_then_die


def main() -> None:
    action, root = sys.argv[1], Path(sys.argv[2])
    with scaletrain.init(strategy="fsdp", seed=0) as run:
        net = model()
        if action == "resume":  # the weights must come from the checkpoint
            with torch.no_grad():
                for p in net.parameters():
                    p.add_(1.0)
        optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
        net, optimizer = run.setup(net, optimizer)
        loader = run.loader(data(), batch_size=8, shuffle=True)
        ckpt = run.checkpointer(root / "ckpt", layout="sharded", asynchronous=True)
        if action == "resume":
            resumed = ckpt.load("auto", net, optimizer, loader=loader)
            run.print(f"RESUMED_AT {resumed['step']}")
        while run.steps_taken < STEPS:
            for batch in loader:
                run.train_step(net, optimizer, batch)
                if run.steps_taken % EVERY == 0:
                    if action == "die" and run.steps_taken == 4 and run.rank == 1:
                        die_when_writing()
                    ckpt.save(run.steps_taken, net, optimizer, loader=loader)
                    run.print(f"saving step {run.steps_taken}", flush=True)
                if run.steps_taken == STEPS:
                    break
        run.print(f"IN_FLIGHT_AT_EXIT {ckpt.in_flight}", flush=True)


if __name__ == "__main__":
    main()
