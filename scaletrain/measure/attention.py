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

    from ..data.batches import call_model

    watch = _Attentions()
    with torch.no_grad(), FlopCounterMode(display=False) as counter, watch:
        call_model(model, inputs)
    if not watch.calls:
        return (), 0.0, 0
    other = sum(n for op, n in counter.get_flop_counts().get("Global", {}).items()
                if "scaled_dot_product" not in str(op))
    attention = sum(flops for _, flops in watch.calls)
    return tuple(kv for kv, _ in watch.calls), attention / (attention + other), watch.sequence


class _Loopback:
    """A ring "exchange" that sends nothing: every piece a process would receive is its own
    again, so a ring process's arithmetic is timed without its communication."""

    def __init__(self, size: int):
        self.rank, self.size = 0, size  # every process of a load-balanced ring does the same work

    def start(self, tensor: torch.Tensor, tag: int):
        return _Received(tensor.clone())


class _Received:
    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def wait(self) -> torch.Tensor:
        return self.tensor


def _seconds(fn, repeats: int = 3) -> float:
    import time

    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def attention_seconds(model: nn.Module, inputs, cps: tuple = (2, 4, 8), group=None) -> tuple[float, dict]:
    """(forward + backward seconds of every attention of one step on `inputs`, whole; and for
    each context-parallel degree the sequences allow, the seconds one process of that ring
    spends on the arithmetic of its part of them — or, given the process `group` of a job,
    on its part of a real ring of that group, communication included). Timed on tensors of
    each attention's shape, one per distinct shape, times its count; (0.0, {}) for a model
    without attention."""
    from ..data.batches import call_model
    from ..parallel.ring_attention import ring_attention

    shapes: dict[tuple, int] = {}

    class Shapes(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.scaled_dot_product_attention:
                q, k = args[0], args[1]
                causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
                key = (tuple(q.shape), tuple(k.shape), q.dtype, q.device, causal)
                shapes[key] = shapes.get(key, 0) + 1
            return func(*args, **kwargs)

    with torch.no_grad(), Shapes():
        call_model(model, inputs)
    whole, ring = 0.0, {}
    for (q_shape, k_shape, dtype, device, causal), count in shapes.items():
        def tensors(length: int):
            made = [torch.randn(*q_shape[:2], length, q_shape[3], dtype=dtype, device=device)]
            made += [torch.randn(*k_shape[:2], length, k_shape[3], dtype=dtype, device=device) for _ in range(2)]
            return [t.requires_grad_() for t in made]

        def attend(q, k, v):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1]).sum().backward()

        whole += count * _seconds(lambda t=tensors(q_shape[2]): attend(*t))
        for cp in cps:
            if q_shape[2] % (2 * cp) == 0:
                part = tensors(q_shape[2] // cp)
                exchange = _Loopback(cp) if group is None else None
                ring[cp] = ring.get(cp, 0.0) + count * _seconds(
                    lambda t=part, x=exchange: ring_attention(*t, group, causal=causal, exchange=x).sum().backward())
    return whole, ring
