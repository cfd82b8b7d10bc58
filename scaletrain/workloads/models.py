"""The built-in models. Each is an nn.Sequential of named blocks, so strategies that split
a model into consecutive parts (model parallel, pipeline) can do so by block."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn


def digits_cnn(num_classes: int = 10) -> nn.Sequential:
    """A small CNN for 8×8 grey digits."""
    return nn.Sequential(OrderedDict(
        conv1=nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU()),
        conv2=nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
        fc1=nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU()),
        fc2=nn.Linear(128, num_classes),
    ))


def digits_mlp(num_classes: int = 10, hidden: int = 256) -> nn.Sequential:
    """A plain MLP over the 64 pixels of a digit."""
    return nn.Sequential(OrderedDict(
        fc1=nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU()),
        fc2=nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()),
        fc3=nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()),
        fc4=nn.Linear(hidden, num_classes),
    ))


def cifar_cnn(num_classes: int = 10) -> nn.Sequential:
    """The classic small CNN for 32×32 colour images: Conv(3→32)+ReLU+MaxPool,
    Conv(32→64)+ReLU+MaxPool, Linear(4096→512)+ReLU, Linear(512→10)."""
    return nn.Sequential(OrderedDict(
        conv1=nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
        conv2=nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
        fc1=nn.Sequential(nn.Flatten(), nn.Linear(64 * 8 * 8, 512), nn.ReLU()),
        fc2=nn.Linear(512, num_classes),
    ))


def wide_mlp(num_classes: int = 10, in_features: int = 3 * 32 * 32, hidden: int = 2048) -> nn.Sequential:
    """A wide MLP over 32×32 colour images: ~10.5 M parameters (42 MB of fp32 gradients)
    but little arithmetic per parameter, so a DDP step spends much of its time all-reducing
    gradients — the model that gradient compression is for."""
    return nn.Sequential(OrderedDict(
        fc1=nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU()),
        fc2=nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()),
        fc3=nn.Linear(hidden, num_classes),
    ))
