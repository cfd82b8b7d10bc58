"""The model the planner traces: a decoder-only transformer of a given shape, written in
plain torch the way the training libraries write it (torchtitan's Llama, Megatron's and
Hugging Face's GPT), as one tensor-parallel process holds it: `tp` divides the attention
heads, the feed-forward width and the vocabulary (column- then row-parallel products); a
mixture of experts' feed-forward is `mixture.py`'s, as one expert-parallel process (of `ep`)
holds it. Built
under fake tensors, no memory is taken; its forward and backward give torch's FLOP counts,
the operators' shapes and the activations kept, for any size of model.

Its FLOPs equal the Hugging Face model's of the same config (tests/test_cluster_plan.py):
the same products in the same shapes. Its memory-bound operators and what they keep follow the
run's `Layout`: eager norms and rotary embeddings (Hugging Face's and torchtitan's code, fp32
temporaries and copies kept for backward) or fused kernels (`fused_kernels.py`), grouped-query
keys and values expanded to every head or given to the kernel grouped, and the loss as an eager
`cross_entropy(logits.float())` or a fused kernel on the bf16 logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...workloads.model_shapes import ModelShape
from .fused_kernels import FusedCrossEntropy, FusedRotary, FusedSwiGLU, rms_norm
from .mixture import Mixture

FP8 = torch.float8_e4m3fn
FP8_GRAD = torch.float8_e5m2


class _Float8Matmul(torch.autograd.Function):
    """x @ w.T with both cast to float8 with one scale per tensor, as torchao's tensorwise
    recipe does: the casts' amax, the three products in fp8 (output, input gradient,
    weight gradient), the copies that give them the layouts the fp8 kernels need."""

    @staticmethod
    def forward(ctx, x, w):
        x8, sx = _cast(x, FP8)
        w8, sw = _cast(w, FP8)
        ctx.save_for_backward(x8, w8, sx, sw)
        out = torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)
        return out

    @staticmethod
    def backward(ctx, grad):
        x8, w8, sx, sw = ctx.saved_tensors
        g8, sg = _cast(grad, FP8_GRAD)
        w_col = w8.t().contiguous().t()  # (n, k) held column-major
        dx = torch._scaled_mm(g8, w_col, scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), scale_a=sg, scale_b=sx,
                              out_dtype=torch.bfloat16)
        return dx, dw


def _cast(t: torch.Tensor, dtype) -> tuple:
    scale = t.abs().amax().float().clamp(min=1e-12).reciprocal()
    return (t * scale).to(dtype), scale.reciprocal()


class Linear(nn.Module):
    def __init__(self, inputs: int, outputs: int, bias: bool, float8: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(outputs, inputs))
        self.bias = nn.Parameter(torch.empty(outputs)) if bias else None
        self.float8 = float8

    def forward(self, x):
        if not self.float8:
            return F.linear(x, self.weight, self.bias)
        shape = x.shape
        out = _Float8Matmul.apply(x.reshape(-1, shape[-1]), self.weight).view(*shape[:-1], -1)
        return out + self.bias if self.bias is not None else out


@dataclass(frozen=True)
class Layout:
    """How the run's code lays a layer out in memory (see the module's docstring)."""
    fused_layers: bool = False  # rotary embeddings and SwiGLU as fused kernels (the norms too)
    kv_expanded: bool = True
    fused_norms: bool = False  # RMSNorm as torch's fused kernel
    loss: str = "eager"  # eager: traced as torch runs it; fused (and chunked, see loss.py): the fused kernel


class RMSNorm(nn.Module):
    def __init__(self, size: int, fused: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size))
        self.fused = fused

    def forward(self, x):
        if self.fused:
            return rms_norm(x, self.weight)
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)
        return y.type_as(x) * self.weight


def _rotate(x, cos, sin, fused: bool = False):
    if fused:
        return FusedRotary.apply(x, cos, sin)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def gather(x, tp: int):
    """Sequence parallel's all-gather of a layer's input along the sequence: the full tensor
    written (its time is the collective's, costed apart)."""
    return x.repeat(1, tp, 1) if tp > 1 else x


def scatter(x, tp: int):
    """Sequence parallel's reduce-scatter: tp partial sums in, this rank's sequence share out."""
    if tp == 1:
        return x
    b, s, h = x.shape
    return x.view(b, tp, s // tp, h).sum(1)


class Layer(nn.Module):
    def __init__(self, shape: ModelShape, tp: int, attention: str, float8: bool, sequence_parallel: bool = False,
                 layout: Layout = Layout(), ep: int = 1):
        super().__init__()
        self.sp = tp if sequence_parallel else 1
        self.layout = layout
        self.llama = shape.family == "llama"
        h, d = shape.hidden, shape.head_dim
        self.heads, self.kv_heads, self.d = shape.heads // tp, max(1, shape.kv_heads // tp), d
        self.attention, self.dropout = attention, shape.dropout
        bias = shape.bias
        self.norm1, self.norm2 = _norm(shape, layout), _norm(shape, layout)
        self.wq = Linear(h, self.heads * d, bias, float8)
        self.wk = Linear(h, self.kv_heads * d, bias, float8)
        self.wv = Linear(h, self.kv_heads * d, bias, float8)
        self.wo = Linear(self.heads * d, h, bias, float8)
        self.mixture = Mixture(shape, ep) if shape.experts else None
        if self.mixture is None:
            ffn = shape.ffn // tp
            self.w1 = Linear(h, ffn, bias, float8)
            self.w3 = Linear(h, ffn, bias, float8) if self.llama else None
            self.w2 = Linear(ffn, h, bias, float8)

    def forward(self, x, cos, sin):
        x = x + self._drop(scatter(self._attend(gather(self.norm1(x), self.sp), cos, sin), self.sp))
        if self.mixture is not None:  # whole experts in every tensor-parallel process, on its own tokens
            return x + self.mixture(self.norm2(x))
        return x + self._drop(scatter(self._mlp(gather(self.norm2(x), self.sp)), self.sp))

    def _drop(self, x):
        return F.dropout(x, self.dropout, training=True) if self.dropout else x

    def _mlp(self, x):
        if self.llama and self.layout.fused_layers:
            return self.w2(FusedSwiGLU.apply(self.w1(x), self.w3(x)))
        if self.llama:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))

    def _attend(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.d)
        k = self.wk(x).view(b, s, self.kv_heads, self.d)
        v = self.wv(x).view(b, s, self.kv_heads, self.d)
        if self.llama:
            fused = self.layout.fused_layers
            q, k = _rotate(q, cos, sin, fused), _rotate(k, cos, sin, fused)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        expand = self.layout.kv_expanded or self.attention != "flash"
        if self.kv_heads != self.heads and expand:  # grouped-query attention: each key-value head serves a group
            group = self.heads // self.kv_heads
            k = k[:, :, None].expand(b, self.kv_heads, group, s, self.d).reshape(b, self.heads, s, self.d)
            v = v[:, :, None].expand(b, self.kv_heads, group, s, self.d).reshape(b, self.heads, s, self.d)
        if self.attention == "flash" and q.device.type == "meta":
            # traced on the meta device: the flash kernel itself (SDPA's dispatcher would
            # pick the math path for meta tensors); the CPU's has the CUDA kernels' outputs
            out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[0]
        elif self.attention == "flash":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # two batched products and a masked softmax (Megatron-LM's and GPT-2's own)
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d))
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            out = F.dropout(probs, self.dropout, training=True) @ v if self.dropout else probs @ v
        return self.wo(out.transpose(1, 2).reshape(b, s, self.heads * self.d))


class ReferenceLM(nn.Module):
    """Embedding, `layers` decoder layers, the final norm, the output head and the loss."""

    def __init__(self, shape: ModelShape, layers: int, tp: int = 1, attention: str = "flash",
                 float8: bool = False, sequence_parallel: bool = False, layout: Layout = Layout(), ep: int = 1):
        super().__init__()
        self.shape, self.tp, self.layout = shape, tp, layout
        self.sp = tp if sequence_parallel else 1
        h = shape.hidden
        self.embed = nn.Embedding(shape.vocab // tp, h)
        self.positions = nn.Embedding(shape.max_positions, h) if shape.learned_positions else None
        self.layers = nn.ModuleList(Layer(shape, tp, attention, float8, sequence_parallel, layout, ep)
                                    for _ in range(layers))
        self.norm = _norm(shape, layout)
        self.head = Linear(h, shape.vocab // tp, False)  # the output layer stays bf16 under float8 (torchtitan)
        if shape.tie_embeddings:
            self.head.weight = self.embed.weight

    def forward(self, tokens, labels, wrap=None):
        s = tokens.shape[1]
        x = self.embed(tokens.clamp(max=self.embed.num_embeddings - 1))
        if self.positions is not None:
            x = x + self.positions(torch.arange(s, device=tokens.device))
        cos = sin = None
        if self.shape.family == "llama":
            angles = torch.arange(s, device=tokens.device, dtype=torch.float32)[:, None] * \
                torch.ones(self.shape.head_dim, device=tokens.device)
            cos, sin = angles.cos()[None, :, None, :].to(x.dtype), angles.sin()[None, :, None, :].to(x.dtype)
        if self.shape.dropout:
            x = F.dropout(x, self.shape.dropout, training=True)
        if self.sp > 1:  # the residual stream holds this rank's share of the sequence
            x = x[:, : s // self.sp].contiguous()
        for layer in self.layers:
            x = wrap(layer, x, cos, sin) if wrap is not None else layer(x, cos, sin)
        logits = self.head(gather(self.norm(x), self.sp))
        if self.layout.loss != "eager":
            return FusedCrossEntropy.apply(logits)
        logits = logits.float()
        labels = labels.clamp(max=logits.shape[-1] - 1).view(-1)
        if self.tp > 1:  # vocabulary-parallel loss, as torch's loss_parallel computes it (max and sum all-reduced)
            shifted = logits - logits.amax(-1, keepdim=True)
            logits = shifted - torch.log(torch.exp(shifted).sum(-1, keepdim=True))
            return F.nll_loss(logits.view(-1, logits.shape[-1]), labels)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels)


def _norm(shape: ModelShape, layout: Layout) -> nn.Module:
    """RMSNorm (eager or fused) for Llama-style models; LayerNorm, one native kernel, for GPT-style."""
    fused = layout.fused_layers or layout.fused_norms
    return RMSNorm(shape.hidden, fused) if shape.family == "llama" else nn.LayerNorm(shape.hidden)
