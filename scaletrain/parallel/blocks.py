"""Which blocks of a model are its repeating units: what FSDP shards one by one, and what
compilation and activation checkpointing apply to."""

from __future__ import annotations

from torch import nn


def _has_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def model_blocks(model: nn.Module) -> list[str]:
    """A pipeline stage's units; else a transformer's layers (the children of its
    ModuleLists); else the model's top-level children with parameters. A transformer's body
    is one child holding every layer: taking it whole would gather every layer at once."""
    units = getattr(model, "shard_units", None)
    if isinstance(units, list):
        return [name for name in units if _has_parameters(model.get_submodule(name))]
    layers = [f"{name}.{child}" for name, module in model.named_modules() if isinstance(module, nn.ModuleList)
              for child, block in module.named_children() if _has_parameters(block)]
    if layers:
        return layers
    return [name for name, block in model.named_children() if _has_parameters(block)]
