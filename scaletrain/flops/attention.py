"""Attention's FLOPs by scaletrain's own formula, for every fused attention operator torch's
scaled_dot_product_attention dispatches to (flash, memory-efficient, cuDNN, the CPU's flash,
the overridable fused kernel of other backends; forward and backward), on every torch.

torch's own formulas (`torch.utils.flop_counter`) changed between releases: before 2.12 they
assert that queries, keys and values have the same number of heads, which grouped-query
attention (Llama 3, Mistral, Qwen, Gemma: fewer key/value heads, `enable_gqa=True`) does not;
and the CPU's flash attention has no formula at all. The count here is the same on every
torch the package accepts, and equal to torch 2.13's where that one has a formula:

    forward   2·B·Hq·Sq·Sk·(Dqk + Dv)        (scores Q·Kᵀ, then P·V; every query head)
    backward  2·B·Hq·Sq·Sk·(3·Dqk + 2·Dv)    (scores again, dP and dV, dQ and dK)

Causal masking is not discounted (as torch, and the published MFU formulas, count it). Each
operator's formula takes the operator's raw arguments (`_get_raw`: FlopCounterMode hands them
over unchanged), since the kernels lay their tensors out differently: (B, H, S, D) for the
scaled_dot_product ops, (B, S, H, D) — or (tokens, H, D) with cumulative lengths for packed
sequences — for the flash and memory-efficient kernels beneath them.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

import torch

aten = torch.ops.aten


def attention_flops(batch: int, q_heads: int, q_len: int, k_len: int, qk_dim: int, v_dim: int) -> int:
    return 2 * batch * q_heads * q_len * k_len * (qk_dim + v_dim)


def attention_backward_flops(batch: int, q_heads: int, q_len: int, k_len: int, qk_dim: int, v_dim: int) -> int:
    return 2 * batch * q_heads * q_len * k_len * (3 * qk_dim + 2 * v_dim)


def _lengths(offsets, longest, count: int) -> list[int]:
    """Each packed sequence's length from its cumulative offsets (the longest for each where
    the offsets hold no values: fake or meta tensors)."""
    if offsets is None:
        return []
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(offsets, FakeTensor) or offsets.device.type == "meta":
        return [int(longest)] * count
    return [int(n) for n in offsets.diff().tolist()]


def _sizes(q, k, v, layout: str, packed: tuple = ()) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(batch, query heads, query length, key length, query/key width, value width) of each
    attention an operator computes (one, or one per packed sequence)."""
    if layout == "bhsd":
        yield int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), int(k.shape[2]), int(q.shape[-1]), int(v.shape[-1])
        return
    cum_q, cum_k, max_q, max_k = packed or (None, None, 0, 0)
    if cum_q is not None:  # packed sequences: ([1,] tokens, heads, width)
        count = int(cum_q.shape[0]) - 1
        for len_q, len_k in zip(_lengths(cum_q, max_q, count), _lengths(cum_k, max_k, count)):
            yield 1, int(q.shape[-2]), len_q, len_k, int(q.shape[-1]), int(v.shape[-1])
        return
    yield int(q.shape[0]), int(q.shape[2]), int(q.shape[1]), int(k.shape[1]), int(q.shape[-1]), int(v.shape[-1])


def _formula(backward: bool, layout: str, first: int, packed_at: Optional[int] = None) -> Callable:
    """A raw formula: q, k, v at args[first:first + 3]; packed sequences' (cum_q, cum_k,
    max_q, max_k) at args[packed_at:packed_at + 4]."""
    count = attention_backward_flops if backward else attention_flops

    def formula(*args, out_val=None, **kwargs) -> int:
        q, k, v = args[first:first + 3]
        packed = tuple(args[packed_at:packed_at + 4]) if packed_at is not None and len(args) >= packed_at + 4 else ()
        return sum(count(*sizes) for sizes in _sizes(q, k, v, layout, packed))

    formula._get_raw = True  # FlopCounterMode: the arguments as they are, not their shapes
    return formula


#: (operator name, backward, layout, where q is, where the packed lengths are)
_OPERATORS = (
    ("_scaled_dot_product_flash_attention", False, "bhsd", 0, None),
    ("_scaled_dot_product_efficient_attention", False, "bhsd", 0, None),
    ("_scaled_dot_product_cudnn_attention", False, "bhsd", 0, None),
    ("_scaled_dot_product_flash_attention_for_cpu", False, "bhsd", 0, None),
    ("_scaled_dot_product_fused_attention_overrideable", False, "bhsd", 0, None),
    ("_scaled_dot_product_flash_attention_backward", True, "bhsd", 1, None),
    ("_scaled_dot_product_efficient_attention_backward", True, "bhsd", 1, None),
    ("_scaled_dot_product_cudnn_attention_backward", True, "bhsd", 1, None),
    ("_scaled_dot_product_flash_attention_for_cpu_backward", True, "bhsd", 1, None),
    ("_scaled_dot_product_fused_attention_overrideable_backward", True, "bhsd", 1, None),
    ("_flash_attention_forward", False, "bshd", 0, 3),
    ("_efficient_attention_forward", False, "bshd", 0, 4),
    ("_flash_attention_backward", True, "bshd", 1, 6),
    ("_efficient_attention_backward", True, "bshd", 1, 6),
)

#: {operator packet: its raw formula}, for the operators this torch has.
ATTENTION_FLOPS = {getattr(aten, name): _formula(backward, layout, first, packed)
                   for name, backward, layout, first, packed in _OPERATORS if hasattr(aten, name)}
ATTENTION_NAMES = {name for name, *_ in _OPERATORS}
ATTENTION_BACKWARD_NAMES = {name for name, backward, *_ in _OPERATORS if backward}


def attention_shape(name: str, args) -> tuple:
    """(batch, heads, seq_q, seq_k, head_dim) of an attention operator's call (the first
    sequence's, for packed ones): what the planner's cost model reads."""
    for entry in _OPERATORS:
        if entry[0] == name:
            _n, _backward, layout, first, packed_at = entry
            packed = tuple(args[packed_at:packed_at + 4]) if packed_at is not None and len(args) >= packed_at + 4 \
                else ()
            batch, heads, q_len, k_len, qk_dim, _v = next(_sizes(*args[first:first + 3], layout, packed))
            return batch, heads, q_len, k_len, qk_dim
    raise KeyError(name)
