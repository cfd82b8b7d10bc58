"""How long each top-level block of a model takes, forward and backward: what a pipeline
stage (or a model-parallel part) costs, measured rather than guessed from parameter counts.

A convolution with few parameters can cost more than a large linear layer, so a split that
balances parameters need not balance time; the slowest stage sets a pipeline's pace. Each
block runs on the previous block's output (detached, so its backward stops at its own
input), and its backward gets a gradient of its output's shape.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
from torch import nn


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _one_pass(blocks: list[Callable], inputs: torch.Tensor, targets: torch.Tensor, loss_fn: Callable) -> list[float]:
    device = inputs.device
    outputs, entries, forward = [], [], []
    x = inputs
    for block in blocks:
        entry = x.detach().requires_grad_(x.is_floating_point() and len(outputs) > 0)
        _sync(device)
        start = time.perf_counter()
        y = block(entry)
        _sync(device)
        forward.append(time.perf_counter() - start)
        entries.append(entry)
        outputs.append(y)
        x = y
    backward = [0.0] * len(blocks)
    loss = loss_fn(outputs[-1], targets)
    grad = None
    for i in reversed(range(len(blocks))):
        _sync(device)
        start = time.perf_counter()
        if i == len(blocks) - 1:
            loss.backward()
        else:
            outputs[i].backward(grad)
        _sync(device)
        backward[i] = time.perf_counter() - start
        grad = entries[i].grad
    return [f + b for f, b in zip(forward, backward)]


def block_seconds(model: nn.Module, blocks: list[Callable], inputs: torch.Tensor, targets: torch.Tensor,
                  loss_fn: Callable, repeats: int = 5) -> list[float]:
    """Median seconds of forward + backward of each block (the model's units, see
    measure.footprint.model_units) on `inputs`, in order (after one untimed pass). Gradients
    the passes leave on the model are cleared."""
    _one_pass(blocks, inputs, targets, loss_fn)
    passes = [_one_pass(blocks, inputs, targets, loss_fn) for _ in range(repeats)]
    model.zero_grad(set_to_none=True)
    return [statistics.median(times) for times in zip(*passes)]
