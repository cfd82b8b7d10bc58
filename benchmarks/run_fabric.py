"""Lightning Fabric, as its documentation writes the loop (Fabric, launch, setup,
setup_dataloaders, fabric.backward), with its default launcher (it re-runs this script
once per extra process) and its default threads."""

import os
import sys

import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Timer, build, parse_args, timed_epochs  # noqa: E402


def main() -> None:
    args = parse_args()
    devices = args.processes
    fabric = Fabric(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto")
    fabric.launch()
    model, train_set, lr = build(args.workload)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(train_set, batch_size=args.batch_size, shuffle=True))
    timer = Timer(fabric.global_rank, fabric.world_size, args.max_steps)

    def step(inputs, targets):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs), targets)
        fabric.backward(loss)
        optimizer.step()
        return loss.detach()

    loss = timed_epochs(timer, loader, args.epochs, step)
    timer.write(args.result, loss=loss.item())


if __name__ == "__main__":
    main()
