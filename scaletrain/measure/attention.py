"""What a model's attention is, for context parallel's cost: the keys and values each
attention of a forward reads (what the ring passes round, a piece per hop), and attention's
share of the forward's arithmetic (the compute a hop can hide behind).

Counted on one forward, whatever the model: every call of torch's
scaled_dot_product_attention (the built-in GPT's, a Hugging Face model's "sdpa") is seen by a
torch-function mode; the rest of the arithmetic by torch's FLOP counter (its attention
kernels left out: on a CPU it does not count them, on CUDA they are counted here instead).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode


class _Attentions(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls: list[tuple[float, float]] = []  # (keys and values bytes per sample, FLOPs)
        self.sequence = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k, v = args[:3]
            batch, heads, length, width = q.shape
            causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
            flops = 4 * batch * heads * length * k.shape[-2] * width * (0.5 if causal else 1.0)
            kv = (k.numel() * k.element_size() + v.numel() * v.element_size()) / max(1, batch)
            self.calls.append((kv, flops))
            self.sequence = max(self.sequence, k.shape[-2])
        return func(*args, **kwargs)


def attention_facts(model: nn.Module, inputs) -> tuple[tuple, float, int]:
    """(the keys and values of each attention of one forward, bytes per sample of whole
    sequences; attention's share of the forward's FLOPs; the tokens attended over), or
    ((), 0.0, 0) for a model without."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..batches import call_model

    watch = _Attentions()
    with torch.no_grad(), FlopCounterMode(display=False) as counter, watch:
        call_model(model, inputs)
    if not watch.calls:
        return (), 0.0, 0
    other = sum(n for op, n in counter.get_flop_counts().get("Global", {}).items()
                if "scaled_dot_product" not in str(op))
    attention = sum(flops for _, flops in watch.calls)
    return tuple(kv for kv, _ in watch.calls), attention / (attention + other), watch.sequence
