"""A model seen as consecutive units, one tensor passed from each to the next: what pipeline
stages (and single-machine model parallel) are cut from.

Two kinds of model have such a view:
- an `nn.Sequential` (the built-in models are Sequentials of named blocks): each top-level
  block is a unit;
- a Hugging Face decoder that declares its pipeline plan (`config.base_model_pp_plan`:
  embeddings, layers, final norm) and computes rotary position embeddings (Llama, Mistral,
  Qwen2 and their kin): the embeddings, each decoder layer (given the rotary embeddings of
  the positions it sees) and the final norm with the head are the units.

A stage is a `StageModule` holding some consecutive units under the names they have in the
whole model (`model.layers.3.mlp.up_proj.weight`), so a stage's parameters are a plain
subset of the whole model's: checkpoints merge and split them by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..foundation.errors import UsageError


@dataclass
class Unit:
    name: str
    """What the unit is called in plans and messages (its main module's path)."""
    modules: dict
    """path in the whole model -> module, for every module the unit runs."""
    run: Callable[[torch.Tensor], torch.Tensor]

    def parameter_count(self) -> int:
        return sum(p.numel() for m in self.modules.values() for p in m.parameters())


def _is_hf_decoder(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    return (getattr(config, "base_model_pp_plan", None) is not None and base is not None
            and hasattr(base, "rotary_emb") and hasattr(base, "layers") and hasattr(model, "lm_head"))


def has_units(model: nn.Module) -> bool:
    return isinstance(model, nn.Sequential) or _is_hf_decoder(model)


def units_of(model: nn.Module, what: str) -> list[Unit]:
    """The model's units in execution order; UsageError when the model has no such view."""
    if isinstance(model, nn.Sequential):
        return [Unit(name, {name: block}, block) for name, block in model.named_children()]
    if _is_hf_decoder(model):
        return _hf_decoder_units(model)
    raise UsageError(f"{what} cuts models into consecutive blocks that pass one tensor on: a torch.nn.Sequential, "
                     f"or a Hugging Face decoder with a pipeline plan (Llama-style), but got {type(model).__name__}, "
                     f"whose forward may do anything between its blocks; give it as an nn.Sequential of blocks, or use "
                     f"strategy ddp, fsdp or tp, which take any model")


def _hf_decoder_units(model: nn.Module) -> list[Unit]:
    prefix = model.base_model_prefix
    base = getattr(model, prefix)
    rotary = base.rotary_emb
    units = [Unit(f"{prefix}.embed_tokens", {f"{prefix}.embed_tokens": base.embed_tokens}, base.embed_tokens)]
    for index, layer in enumerate(base.layers):
        def run(x: torch.Tensor, layer=layer) -> torch.Tensor:
            # What the whole model's forward gives every layer: the positions 0..T-1 and their
            # rotary embeddings; no attention mask, so attention is causal.
            positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
            out = layer(x, attention_mask=None, position_ids=positions,
                        position_embeddings=rotary(x, positions))
            return out[0] if isinstance(out, tuple) else out
        units.append(Unit(f"{prefix}.layers.{index}", {f"{prefix}.layers.{index}": layer,
                                                       f"{prefix}.rotary_emb": rotary}, run))
    norm, head = base.norm, model.lm_head
    units.append(Unit("lm_head", {f"{prefix}.norm": norm, "lm_head": head}, lambda x: head(norm(x))))
    return units


def _register(root: nn.Module, path: str, module: nn.Module) -> None:
    """Registers `module` at a dotted path under `root`, creating empty containers on the way."""
    *parents, leaf = path.split(".")
    node = root
    for name in parents:
        child = node._modules.get(name)
        if child is None:
            child = nn.Module()
            node.add_module(name, child)
        node = child
    if leaf not in node._modules:
        node.add_module(leaf, module)


class StageModule(nn.Module):
    """Some consecutive units of a model, under their names in the whole model; calling it
    runs them in order."""

    def __init__(self, units: list[Unit]):
        super().__init__()
        for unit in units:
            for path, module in unit.modules.items():
                _register(self, path, module)
        self.__dict__["units"] = units  # not registered again: the modules are above

    @property
    def shard_units(self) -> list[str]:
        """The units' main modules, sharded one by one under FSDP."""
        return [unit.name for unit in self.units]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.units:
            x = unit.run(x)
        return x


def stage_module(units: list[Unit]) -> nn.Module:
    """A stage made of `units`: a Sequential of the blocks when each unit is one top-level
    block (the model's own kind of module), else a StageModule."""
    if all(len(u.modules) == 1 and u.name in u.modules and "." not in u.name and u.run is u.modules[u.name]
           for u in units):
        from collections import OrderedDict

        return nn.Sequential(OrderedDict((u.name, u.modules[u.name]) for u in units))
    return StageModule(units)
