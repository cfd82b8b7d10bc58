"""`compile=True`: torch.compile applied block by block, in place, after tensor parallel and
activation checkpointing and before FSDP or DDP.

Each block's `forward` is replaced by its compiled version on the module itself: the
modules, their parameter names and their hooks stay what they were, so FSDP still shards
(and gathers) block by block, DDP's and FSDP's hooks still run around each call, `run.unwrap`
returns the user's module and checkpoints keep the user's names. (Wrapping in `torch.compile(module)` instead would add `_orig_mod.` to every
name.) Compiling blocks rather than the whole model keeps graphs small and lets the
communication between blocks stay outside them.
"""

from __future__ import annotations

import torch
from torch import nn

from .blocks import model_blocks
from .config import ParallelConfig
from .part import ModelPart


def compile_blocks(module: nn.Module) -> list[str]:
    """Compiles `module`'s blocks (a transformer's layers, else its top-level children with
    parameters, else the module itself) in place; returns their names."""
    names = model_blocks(module) or [""]
    for name in names:
        block = module.get_submodule(name) if name else module
        block.forward = torch.compile(block.forward)
    return names


class Compile:
    name = "compile"

    def enabled(self, config: ParallelConfig) -> bool:
        # float8 pays only compiled (parallel/float8.py): its scales and casts fused
        return bool(config.option("compile", False)) or config.option("precision") == "float8"

    def apply(self, part: ModelPart, config: ParallelConfig, topology) -> None:
        compiled = compile_blocks(part.module)
        part.banner.append(f"torch.compile on {len(compiled)} block(s) ({', '.join(n for n in compiled if n) or 'the model'}); "
                           "the first steps are slow while they compile")
