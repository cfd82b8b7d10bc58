"""Synthetic 32×32 colour images for speed work, where only throughput matters.

Labels come from a fixed random linear map of the pixels, so the task is learnable and a
loss that falls still means something, but accuracy claims belong to real data (digits)."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

TRAIN_SAMPLES = 1024
HELD_OUT_SAMPLES = 256


def synthetic_images(seed: int, train: int = TRAIN_SAMPLES, held_out: int = HELD_OUT_SAMPLES,
                     num_classes: int = 10) -> tuple[TensorDataset, TensorDataset]:
    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(train + held_out, 3, 32, 32, generator=gen)
    projection = torch.randn(3 * 32 * 32, num_classes, generator=gen)
    labels = (images.flatten(1) @ projection).argmax(dim=1)
    return (TensorDataset(images[:train], labels[:train]),
            TensorDataset(images[train:], labels[train:]))
