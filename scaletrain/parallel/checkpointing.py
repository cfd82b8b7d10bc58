"""Activation checkpointing, applied after tensor parallel and before compilation and FSDP:
a block's forward keeps only its input for backward and runs again there, trading compute
for the memory its activations would hold.

- "full": every block (a transformer's layers, else the model's top-level blocks with
  parameters; see blocks.py) is checkpointed;
- "selective": with `ac_every` k, every k-th block; without it, every block under torch's
  operator-level policy, which keeps the outputs of the expensive operations (matrix
  products, attention) and recomputes only the cheap ones (norms, activations, additions).

The block's `forward` is replaced in place, so module names, FSDP's sharding block by block
and checkpoints stay what they were. The recomputation gives the same values: losses and
gradients are unchanged.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from .blocks import model_blocks
from .config import ParallelConfig
from .part import ModelPart

MODES = ("none", "full", "selective")


def kept_ops() -> set:
    """The operators whose outputs selective checkpointing keeps: the costly ones."""
    aten = torch.ops.aten
    return {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.linear.default,
            aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default, aten.convolution.default}


def _save_expensive_ops():
    """torch's selective policy: keep what is costly to compute again, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    keep = kept_ops()

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def checkpoint_block(block: nn.Module, selective_ops: bool = False) -> None:
    """Makes `block`'s forward keep only its inputs and run again in backward."""
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    forward = block.forward
    context = functools.partial(create_selective_checkpoint_contexts, _save_expensive_ops()) if selective_ops else None

    def checkpointed(*args, **kwargs):
        if context is None:
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, context_fn=context, **kwargs)
    block.forward = checkpointed


def chosen_blocks(blocks: list[str], mode: str, every: int | None) -> list[str]:
    if mode == "full" or (mode == "selective" and every is None):
        return blocks
    return [name for i, name in enumerate(blocks) if (i + 1) % every == 0]


class ActivationCheckpointing:
    name = "activation_checkpointing"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.option("activation_checkpointing", "none") != "none"

    def apply(self, part: ModelPart, config: ParallelConfig, topology) -> None:
        mode, every = config.option("activation_checkpointing"), config.option("ac_every")
        blocks = model_blocks(part.module)
        chosen = chosen_blocks(blocks, mode, every)
        ops = mode == "selective" and every is None
        for name in chosen:
            checkpoint_block(part.module.get_submodule(name), selective_ops=ops)
        how = "keeping matrix products, recomputing the rest" if ops else "recomputed in backward"
        part.facts["activation_checkpointing"] = {"mode": mode, "every": every, "blocks": chosen}
        part.banner.append(f"activation checkpointing ({mode}): {len(chosen)} of {len(blocks)} block(s), {how}")
