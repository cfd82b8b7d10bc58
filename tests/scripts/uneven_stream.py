"""A stream that is not the same on every rank: 200 samples on rank 0, 120 on rank 1 (say, a
file read from each machine's own disk). The ranks must stop together, naming it."""
import os

import torch
from torch import nn
from torch.utils.data import IterableDataset

import scaletrain


class Samples(IterableDataset):
    def __iter__(self):
        count = 200 if os.environ["RANK"] == "0" else 120
        for i in range(count):
            yield torch.full((4,), float(i)), torch.tensor(i % 2)


if __name__ == "__main__":
    with scaletrain.init(strategy="ddp", pin=False) as run:
        model = nn.Linear(4, 2)
        model, optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
        for inputs, targets in run.loader(Samples(), batch_size=8):
            run.train_step(model, optimizer, inputs, targets, nn.functional.cross_entropy)
        run.print("TRAINED")
