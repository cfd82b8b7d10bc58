"""`compile=True`: torch.compile applied block by block, in place.

Each block's `forward` is replaced by its compiled version on the module itself, after the
strategy has prepared the model: the modules, their parameter names and their hooks stay
what they were, so FSDP still shards (and gathers) block by block, DDP's and FSDP's hooks
still run around each call, `run.unwrap` returns the user's module and checkpoints keep the
user's names. (Wrapping in `torch.compile(module)` instead would add `_orig_mod.` to every
name.) Compiling blocks rather than the whole model keeps graphs small and lets the
communication between blocks stay outside them.
"""

from __future__ import annotations

import torch
from torch import nn

from .strategies.fsdp import shard_units


def compile_blocks(module: nn.Module) -> list[str]:
    """Compiles `module`'s blocks (a transformer's layers, else its top-level children with
    parameters, else the module itself) in place; returns their names."""
    names = shard_units(module) or [""]
    for name in names:
        block = module.get_submodule(name) if name else module
        block.forward = torch.compile(block.forward)
    return names
