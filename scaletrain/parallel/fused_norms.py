"""`fused_norms=True` (the default): a model's RMSNorm modules of the forms popular model
families write by hand computed by torch's fused `rms_norm`, with the same maths.

Hugging Face's `LlamaRMSNorm` (and its copies in Mistral, Qwen2, Qwen3, Phi-3, Granite and
some hundred more classes of transformers) is seven kernels per call — upcast, square, mean,
add ε, reciprocal square root, multiply, cast back — each reading and writing the activations;
`torch.nn.functional.rms_norm` is one (fused on CUDA). A module is recognised by its
`forward`'s code, not its name, so that only the maths below is ever replaced:

- llama: `weight * (x.float() · rsqrt(mean(x²) + ε)).to(x.dtype)` — the normalised value
  rounded to the input's dtype, then the weight's product in the promoted dtype. Replaced by
  `weight * rms_norm(x, ε).to(x.dtype)`: rms_norm computes in float32 and rounds once, as
  the original does (also under autocast, which runs rms_norm in float32);
- gemma: `(x.float() · rsqrt(mean(x²) + ε) · (1 + w.float())).type_as(x)` — one rounding
  at the end; replaced by `(rms_norm(x.float(), ε) * (1 + w.float())).type_as(x)`.

Equal to float round-off (a reduction in another order): tests/test_one_gpu_path.py. The
module, its parameter and its name are unchanged (the forward is replaced on the instance):
checkpoints are the same. Applied first, before anything wraps or compiles the blocks.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .config import ParallelConfig
from .part import ModelPart

#: The forms recognised: their `forward`'s statements (docstring left out), as ast.unparse writes them.
LLAMA = """input_dtype = hidden_states.dtype
hidden_states = hidden_states.to(torch.float32)
variance = hidden_states.pow(2).mean(-1, keepdim=True)
hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
return self.weight * hidden_states.to(input_dtype)"""
GEMMA = """output = self._norm(x.float())
output = output * (1.0 + self.weight.float())
return output.type_as(x)"""
GEMMA_NORM = "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)"


@functools.lru_cache(maxsize=None)
def _statements(function) -> Optional[str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return "\n".join(ast.unparse(s) for s in body)


def form(module: nn.Module) -> Optional[str]:
    """"llama", "gemma" or None: which recognised RMSNorm `module` is."""
    cls = type(module)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or "forward" not in cls.__dict__:
        return None
    code = _statements(cls.forward)
    if code == LLAMA and isinstance(getattr(module, "variance_epsilon", None), float):
        return "llama"
    if code == GEMMA and isinstance(getattr(module, "eps", None), float) and "_norm" in cls.__dict__ \
            and _statements(cls._norm) == GEMMA_NORM:
        return "gemma"
    return None


def _llama(self, hidden_states: torch.Tensor) -> torch.Tensor:
    normed = F.rms_norm(hidden_states, (hidden_states.shape[-1],), None, self.variance_epsilon)
    return self.weight * normed.to(hidden_states.dtype)


def _gemma(self, x: torch.Tensor) -> torch.Tensor:
    normed = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)
    return (normed * (1.0 + self.weight.float())).type_as(x)


FUSED = {"llama": _llama, "gemma": _gemma}


def fuse_norms(model: nn.Module) -> dict[str, int]:
    """Replaces, in place, the forward of every recognised RMSNorm; {form: how many}."""
    found: dict[str, int] = {}
    for module in model.modules():
        kind = form(module)
        if kind is not None:
            module.forward = types.MethodType(FUSED[kind], module)
            found[kind] = found.get(kind, 0) + 1
    return found


class FusedNorms:
    name = "fused_norms"

    def enabled(self, config: ParallelConfig) -> bool:
        return bool(config.option("fused_norms", True))

    def apply(self, part: ModelPart, config: ParallelConfig, topology) -> None:
        found = fuse_norms(part.module)
        if found:
            part.facts["fused_norms"] = found
            part.banner.append(f"fused norms: {sum(found.values())} RMSNorm module(s) computed by torch's rms_norm "
                               "(the same maths, one kernel)")
