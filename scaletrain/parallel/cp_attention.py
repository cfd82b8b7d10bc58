"""Where a model's attention meets context parallel: the hooks that send it round the ring.

While a context-parallel forward is in progress (`active`: set by the model's wrapper when it
splits a batch, and kept for backward, where activation checkpointing runs blocks again),
attention over the local piece of the sequence becomes attention over the whole sequence:

- a model that calls `torch.nn.functional.scaled_dot_product_attention` inside its blocks (the
  built-in GPT, most hand-written transformers): each block runs under a torch-function mode
  that routes that call (`route_blocks`);
- a Hugging Face model: its attention goes through transformers' attention interface, to
  which scaletrain registers its own function (`use_hf_interface`); transformers then builds
  no mask either, since the split sequences are known to be unpadded;
- your own attention, written otherwise: call `context_parallel_attention(q, k, v)` where you
  would compute softmax(q kᵀ) v; without context parallel it is torch's
  scaled_dot_product_attention;
- your own positions (learned tables, rotary): `token_positions(length, device)` gives the
  positions, in the whole sequence, of the tokens this process holds (0 … length − 1 without
  context parallel).

What computes the attention: on CUDA over NCCL, torch's own context-parallel machinery
(`torch.distributed.tensor.experimental`: the local pieces as DTensors sharded on the
sequence, its ring over the flash, memory-efficient or cuDNN kernels, the same load-balanced
order); everywhere else — CPUs with Gloo, or a Gloo group on CUDA — scaletrain's ring
(ring_attention.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ..foundation.errors import UsageError
from .eager_only import eager_only
from .ring_attention import ring_attention
from .sequence_split import SequenceSplit

HF_NAME = "scaletrain_context_parallel"


@dataclass
class Active:
    """The context-parallel forward in progress: the split of its sequences and the group."""
    split: SequenceSplit
    group: Any
    mesh: Any
    path: str  # "torch" or "ring"
    calls: int = 0


_active: Optional[Active] = None  # a plain global: autograd's threads read it in backward too


def activate(active: Optional[Active]) -> None:
    global _active
    _active = active


def current() -> Optional[Active]:
    return _active


def token_positions(length: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The positions in the whole sequence of the `length` tokens this process holds."""
    if _active is not None and _active.split.local_length == length:
        return _active.split.positions(device)
    return torch.arange(length, device=device)


def context_parallel_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = True,
                               scale: Optional[float] = None) -> torch.Tensor:
    """Attention of q (batch, heads, tokens, width) to k and v (their heads may divide q's:
    grouped queries): across the context-parallel group while a split forward is in
    progress, else torch's scaled_dot_product_attention."""
    active = _active
    if active is None or active.split.local_length != q.shape[2]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
                                              enable_gqa=k.shape[1] != q.shape[1])
    active.calls += 1
    if active.path == "torch":
        return _torch_ring(q, k, v, active.mesh, is_causal, scale)
    return ring_attention(q, k, v, active.group, causal=is_causal, scale=scale)


def _sdpa_under_cp(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if attn_mask is not None:
        raise UsageError("context parallel computes attention without a mask (causal: is_causal=True), but this model "
                         "passes a mask to scaled_dot_product_attention; give it is_causal=True instead, or use "
                         "another parallelism than cp")
    if dropout_p:
        raise UsageError(f"context parallel computes attention without dropout, but this model's attention drops "
                         f"{dropout_p}; set its attention dropout to 0, or use another parallelism than cp")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise UsageError("scaled_dot_product_attention got fewer key heads than query heads without enable_gqa")
    return context_parallel_attention(query, key, value, is_causal=is_causal, scale=scale)


class _RouteAttention(TorchFunctionMode):
    """Inside a block: torch's scaled_dot_product_attention goes round the ring while a split
    forward is in progress (and stays torch's otherwise)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and _active is not None:
            return _sdpa_under_cp(*args, **kwargs)
        return func(*args, **kwargs)


def route_blocks(module: nn.Module, blocks: list[str]) -> None:
    """Runs each block's forward (the whole module's, with no blocks) under `_RouteAttention`:
    in place, so that activation checkpointing's recomputation goes through it as well."""
    for name in blocks or [""]:
        block = module.get_submodule(name) if name else module
        forward = block.forward

        def routed(*args, _forward=forward, **kwargs):
            with _RouteAttention():
                return _forward(*args, **kwargs)
        block.forward = routed


# -- Hugging Face models: their attention interface ------------------------------------------
def is_hf_model(module: nn.Module) -> bool:
    config = getattr(module, "config", None)
    return config is not None and hasattr(config, "_attn_implementation") and any(
        cls.__name__ == "PreTrainedModel" for cls in type(module).__mro__)


def _hf_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
                  **kwargs):
    """transformers' attention interface: (output (batch, tokens, heads, width), no weights)."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if _active is None:  # whole sequences, unsplit (evaluation): torch's kernel, as "sdpa" would
        out = F.scaled_dot_product_attention(query, key, value, is_causal=causal and query.shape[2] > 1,
                                             scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
    else:
        out = _sdpa_under_cp(query, key, value, dropout_p=dropout if module.training else 0.0, is_causal=causal,
                             scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_hf_interface(model: nn.Module) -> str:
    """Makes a transformers model's attention scaletrain's; returns the implementation it had."""
    from transformers import AttentionInterface

    before = model.config._attn_implementation
    AttentionInterface.register(HF_NAME, _hf_attention)
    model.set_attn_implementation(HF_NAME)
    return before


# -- torch's own machinery (CUDA over NCCL) ----------------------------------------------------
def torch_path_available(device_type: str, backend: str) -> bool:
    """Whether torch's context-parallel attention runs here: its ring dispatches only CUDA
    kernels, and it communicates with NCCL collectives."""
    if device_type != "cuda" or backend != "nccl":
        return False
    try:
        from torch.distributed.tensor.experimental._attention import _enable_context_parallel_dispatcher  # noqa
    except ImportError:
        return False
    return True


def enable_torch_path() -> None:
    """Registers torch's context-parallel handlers for DTensor attention (its load-balanced
    order is the one `SequenceSplit` uses)."""
    from torch.distributed.tensor.experimental import _attention

    _attention._cp_options.enable_load_balance = True
    _attention._enable_context_parallel_dispatcher()


@eager_only
def _torch_ring(q, k, v, mesh, causal: bool, scale: Optional[float]) -> torch.Tensor:
    from torch.distributed.tensor import DTensor, Shard

    if k.shape[1] != q.shape[1]:  # torch's ring takes as many key heads as query heads
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    q, k, v = (DTensor.from_local(t.contiguous(), mesh, [Shard(2)], run_check=False) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale).to_local()
