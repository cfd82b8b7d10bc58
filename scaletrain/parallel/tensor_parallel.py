"""Tensor parallel, applied to the model (or this process's pipeline stage) before activation
checkpointing, compilation and FSDP: each layer's matrices split across the processes of the
mesh's "tp" dimension, through torch.distributed.tensor.parallel (DTensor).

In a transformer block the first matrices of attention (q, k, v) and of the MLP (up, gate)
are split by columns — each process computes some heads, some hidden units, from the whole
input — and the last ones (attention's output, the MLP's down projection) by rows, whose
partial results one all-reduce sums: two all-reduces per block forward, two backward. The
rest (embeddings, norms) stays whole in every process.

Where the plan comes from, first found:
1. the user's function, `parallelize=fn(model, tp_mesh)` (`--parallelize module:function`),
   which applies `torch.distributed.tensor.parallel.parallelize_module` itself;
2. the model's modules: a module class with a `tp_plan` attribute ({"qkv": "colwise", "proj":
   "rowwise", ...}, the built-in stdlib-gpt's blocks), applied to every such module;
3. a Hugging Face model's own declaration (`config.base_model_tp_plan`, and the head's in the
   model class's `_tp_plan`), e.g. Llama's q/k/v/gate/up column-wise and o/down row-wise.
"""

from __future__ import annotations

import fnmatch
from typing import Callable, Optional

from torch import nn

from ..foundation.errors import AgreedError, UsageError, arg, by_door
from .config import ParallelConfig
from .dims import TP
from .part import ModelPart
from .topology import Topology

#: The styles a plan may name (the vocabulary of Hugging Face's plans), as torch's classes.
STYLES = ("colwise", "rowwise", "colwise_rep", "colwise_gather_output", "rowwise_rep", "rowwise_split_input")


def tp_style(name: str, where: str):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if name == "colwise":
        return ColwiseParallel()
    if name == "rowwise":
        return RowwiseParallel()
    if name in ("colwise_rep", "colwise_gather_output"):
        return ColwiseParallel(output_layouts=Replicate())
    if name in ("rowwise_rep", "rowwise_split_input"):
        return RowwiseParallel(input_layouts=Replicate() if name == "rowwise_rep" else Shard(-1))
    raise UsageError(f"{where}: the tensor-parallel style {name!r} is not supported (supported: {', '.join(STYLES)}); "
                     "apply your own plan: " + by_door("parallelize=fn(model, tp_mesh)",
                                                      "--parallelize MODULE:FUNCTION, a function fn(model, tp_mesh)"))


def module_plan(model: nn.Module) -> dict[str, str]:
    """{module path: style} for every module of the model that declares a `tp_plan`."""
    plan = {}
    for path, module in model.named_modules():
        declared = getattr(type(module), "tp_plan", None)
        if isinstance(declared, dict):  # (Hugging Face models have a `tp_plan` property of their own)
            for child, style in declared.items():
                plan[f"{path}.{child}" if path else child] = style
    return plan


def hf_plan(model: nn.Module) -> dict[str, str]:
    """A Hugging Face model's declared plan, keys relative to `model` (wildcards kept)."""
    config = getattr(model, "config", None)
    base_plan = getattr(config, "base_model_tp_plan", None) or {}
    prefix = getattr(model, "base_model_prefix", "")
    plan = {}
    if base_plan and prefix and hasattr(model, prefix):
        plan.update({f"{prefix}.{key}": style for key, style in base_plan.items()})
    elif base_plan:
        plan.update(base_plan)
    plan.update(getattr(type(model), "_tp_plan", None) or {})
    return plan


def _hf_heads_check(model: nn.Module, tp: int) -> None:
    config = getattr(model, "config", None)
    for field in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, field, None)
        if isinstance(heads, int) and heads % tp:
            raise UsageError(f"{arg('tp', tp)}: the model's {heads} {field.replace('_', ' ').replace('num ', '')} "
                             f"cannot be split {tp} ways; use a {arg('tp')} that divides {heads}")


def declared_plan(model: nn.Module) -> dict[str, str]:
    return module_plan(model) or hf_plan(model)


def check_tensor_parallel(model: nn.Module, tp: int, hook: Optional[Callable]) -> None:
    """Refuses, in one line, a model tensor parallel cannot split `tp` ways. Works on a model
    built on the meta device (shapes only)."""
    if tp == 1 or hook is not None:
        return
    conv1d = [path for path, m in model.named_modules() if type(m).__name__ == "Conv1D"]
    plan = declared_plan(model)
    if not plan:
        hint = (" (GPT-2's Conv1D layers are transposed Linear layers that torch's tensor parallel does not split)"
                if conv1d else "")
        raise UsageError(f"{arg('tp', tp)}: the model ({type(model).__name__}) has no tensor-parallel plan{hint}; "
                         "use strategy ddp or fsdp, or give " + by_door("parallelize=fn(model, tp_mesh)",
                                                                        "--parallelize MODULE:FUNCTION, a function "
                                                                        "fn(model, tp_mesh),")
                         + " that applies torch.distributed.tensor.parallel.parallelize_module")
    for key, style in plan.items():
        tp_style(style, f"the model's plan for {key}")
    _hf_heads_check(model, tp)
    for path, module in model.named_modules():
        heads = getattr(module, "heads", None)
        if isinstance(getattr(type(module), "tp_plan", None), dict) and isinstance(heads, int) and heads % tp:
            raise UsageError(f"{arg('tp', tp)}: {('block ' + path) if path else 'the model'} has {heads} attention heads, which cannot be "
                             f"split {tp} ways; use a {arg('tp')} that divides {heads}")
    for key, style in plan.items():
        for path, module in model.named_modules():
            if not fnmatch.fnmatchcase(path, key) or not isinstance(module, nn.Linear):
                continue
            size = module.out_features if style.startswith("colwise") else module.in_features
            if size % tp:
                raise UsageError(f"{arg('tp', tp)}: {path} has {size} {'outputs' if style.startswith('colwise') else 'inputs'}, "
                                 f"which cannot be split {tp} ways; use a {arg('tp')} that divides {size}")


def split_parameters(module: nn.Module, mesh) -> list[str]:
    """Names of `module`'s parameters that are DTensors sharded over `mesh` (tensor parallel's)."""
    found = []
    for name, param in module.named_parameters():
        placements = getattr(param, "placements", ())
        if getattr(param, "device_mesh", None) == mesh and any(p.is_shard() for p in placements):
            found.append(name)
    return found


class TensorParallel:
    name = "tensor_parallel"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.dims.tp > 1

    def apply(self, part: ModelPart, config: ParallelConfig, topology: Topology) -> None:
        from torch.distributed.tensor.parallel import parallelize_module

        tp = config.dims.tp
        mesh = topology.submesh(TP)
        hook = config.option("parallelize")
        module = part.module
        if isinstance(hook, str):
            from ..foundation.user_code import load_factory

            hook = load_factory(hook, "--parallelize")
        if hook is not None:
            hook(module, mesh)
            split = split_parameters(module, mesh)
            if not split and not config.pipelined:  # (one pipeline stage may have nothing to split)
                raise AgreedError(
                    f"{arg('parallelize')}: your function returned without splitting any parameter across the "
                    f"{tp} tensor-parallel processes, so each would compute the whole model; apply "
                    f"torch.distributed.tensor.parallel.parallelize_module(model, tp_mesh, plan) in it, or leave "
                    f"{arg('tp')} out (strategy ddp or fsdp)")
            total = sum(1 for _ in module.parameters())
            source = f"your parallelize function: {len(split)} of {total} parameter tensors split"
        else:
            # The rules were read from the whole model (a pipeline stage has lost its config):
            # those that name a module of this part apply to it.
            paths = [path for path, _ in module.named_modules()]
            rules = {key: style for key, style in part.tp_rules.items()
                     if any(fnmatch.fnmatchcase(path, key) for path in paths)}
            parallelize_module(module, mesh, {key: tp_style(style, key) for key, style in rules.items()})
            source = f"{len(rules)} rule(s) of the model's plan"
        part.facts["tensor_parallel"] = tp
        part.banner.append(f"tensor parallel: layers split {tp} ways ({source})")
