"""Training written with scaletrain's library API, as a user would write it.

The same file runs unchanged as one process or as many:

    python examples/train_digits.py
    torchrun --nproc-per-node 2 examples/train_digits.py
    mpirun -np 2 python examples/train_digits.py
    srun -n 2 python examples/train_digits.py
"""

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

import scaletrain


def digits(seed: int = 0):
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    train, held_out = order[:1437], order[1437:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[held_out], y[held_out])


def main():
    with scaletrain.init(strategy="ddp", seed=0) as run:
        train_set, held_out = digits()
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        model, optimizer = run.setup(model, optimizer)
        loader = run.loader(train_set, batch_size=32, shuffle=True)  # per process; reshuffled each epoch
        for epoch in range(1, 11):
            for inputs, targets in loader:
                loss = run.train_step(model, optimizer, inputs, targets, nn.functional.cross_entropy)
            result = run.evaluate(model, held_out, batch_size=256)  # every held-out sample counted once
            run.print(f"epoch {epoch} loss {run.mean(loss):.4f} held-out accuracy {result['accuracy']:.4f} "
                      f"({result['count']} samples, world size {run.world_size})")


if __name__ == "__main__":
    main()
