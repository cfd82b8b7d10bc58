"""Models whose constructors do what replaying their modules' initialisation cannot: a buffer
computed in `__init__` by a module that has `reset_parameters`, an initialisation of the
constructor's own after its children are built, and weights tied after both modules drew
theirs. For the digits (8×8 images, 10 classes), as an nn.Sequential of blocks that pass one
tensor on, so that fsdp, tp (with `parallelize`) and pipeline all take it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

WIDTH = 32


class MaskedLinear(nn.Linear):
    """A lower-triangular linear map: its mask is computed in the constructor."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__(n_in, n_out)
        self.register_buffer("mask", torch.tril(torch.ones(n_out, n_in)))

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


class Block(nn.Module):
    """A residual MLP whose constructor initialises its layers its own way."""

    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        nn.init.orthogonal_(self.up.weight)
        nn.init.constant_(self.up.bias, 0.01)
        nn.init.zeros_(self.down.bias)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Tied(nn.Module):
    """Two maps sharing one weight, tied after both drew theirs: the first one's values stay."""

    def __init__(self, width: int):
        super().__init__()
        self.first = nn.Linear(width, width, bias=False)
        self.second = nn.Linear(width, width, bias=False)
        self.second.weight = self.first.weight

    def forward(self, x):
        return self.second(torch.tanh(self.first(x)))


def model() -> nn.Sequential:
    return nn.Sequential(nn.Sequential(nn.Flatten(), MaskedLinear(64, WIDTH)), Block(WIDTH), Tied(WIDTH),
                         nn.Linear(WIDTH, 10))


def plain() -> nn.Sequential:
    """A model whose modules initialise themselves: replaying them is an ordinary build."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))


def parallelize(module: nn.Module, tp_mesh) -> None:
    """Tensor parallel for `model()`: the residual block's two layers, column- then row-wise."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    parallelize_module(module[1], tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
