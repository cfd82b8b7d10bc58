"""Factories for `scaletrain train --model/--dataset` in the fault tests: a model that starts
producing inf part-way through training, and data with an empty held-out set."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from scaletrain.workloads.digits import digits_datasets
from scaletrain.workloads.models import digits_mlp

#: Training forwards that stay finite; from the next one on the output is multiplied by inf.
FINITE_FORWARDS = 12


class InfLater(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = digits_mlp()
        self.forwards = 0  # counted per process: every rank of a data-parallel run blows up at the same step

    def forward(self, x):
        out = self.net(x)
        if self.training:
            self.forwards += 1
            if self.forwards > FINITE_FORWARDS:
                out = out * float("inf")
        return out


def inf_later() -> nn.Module:
    return InfLater()


def inf_at_once() -> nn.Module:
    """A model whose very first output is already inf: no learning rate is to blame."""
    model = InfLater()
    model.forwards = FINITE_FORWARDS
    return model


def no_held_out():
    train, _ = digits_datasets(0)
    return train, TensorDataset(torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.int64))


def empty_training_split():
    _, held_out = digits_datasets(0)
    return TensorDataset(torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.int64)), held_out


class _Pooled(nn.Module):
    """Classifies a sequence of any length: its tokens' embeddings averaged."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(16, 8), nn.Linear(8, 2)

    def forward(self, ids):
        return self.head(self.embed(ids).mean(dim=-2))


def pooled() -> nn.Module:
    return _Pooled()


class _Listed(torch.utils.data.Dataset):
    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        return self.samples[index]


def ragged_sequences():
    """Sequences of 3 to 9 tokens (not padded), labelled by their first token's parity."""
    generator = torch.Generator().manual_seed(0)
    samples = [(ids, int(ids[0]) % 2) for ids in
               (torch.randint(0, 16, (3 + i % 7,), generator=generator) for i in range(40))]
    return _Listed(samples[:24]), _Listed(samples[24:])
