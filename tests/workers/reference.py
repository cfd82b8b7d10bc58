"""The tiny model and fixed global batches that distributed tests compare against."""

import torch
from torch import nn

GLOBAL_BATCH = 8
STEPS = 3


def tiny_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))


def global_batches():
    gen = torch.Generator().manual_seed(123)
    for _ in range(STEPS):
        yield torch.randn(GLOBAL_BATCH, 8, generator=gen), torch.randint(0, 3, (GLOBAL_BATCH,), generator=gen)


def one_process_reference() -> dict:
    """Same seed, same initial weights, same global batches, one process."""
    torch.manual_seed(0)
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for inputs, targets in global_batches():
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
