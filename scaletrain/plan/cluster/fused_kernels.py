"""Fused kernels as the planner's reference model traces them: what one fused kernel reads,
writes and keeps for backward, in torch operators of the same traffic, so that the trace's
bytes, kernels and live memory are the fused kernel's (their values are not; nothing runs).

- RMSNorm: torch's own fused kernel (`aten._fused_rms_norm`, which a CUDA build runs for
  `F.rms_norm`): reads x and the weight, writes y and one fp32 rstd per token; keeps x and rstd
  (Apex's, Transformer Engine's and flash-attn's fused norms keep the same).
- rotary embedding: one kernel reading q (or k) and the cos/sin table, writing the rotated
  tensor; keeps nothing of the token's (backward rotates the gradient the other way).
- SwiGLU: one kernel reading the two products' outputs and writing silu(a)·b; keeps a and b
  (backward recomputes silu in registers).
- cross-entropy, fused (flash-attn's, Liger's, Megatron-LM's vocabulary-parallel one): one
  kernel reads the bf16 logits and writes their bf16 gradient (softmax − one-hot, the loss's
  per-token log-sum-exp aside) in forward; backward scales it. It keeps the gradient, not an
  fp32 copy: the logits and their gradient are what lives (2 × the bf16 logits).
"""

from __future__ import annotations

import torch


class FusedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = torch.ops.aten._fused_rms_norm_backward(grad, x, [x.shape[-1]], rstd, weight, [True, True])
        return dx, dw, None


class FusedRotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos)
        return x * cos  # one read of x and the table, one write: the fused kernel's traffic

    @staticmethod
    def backward(ctx, grad):
        (cos,) = ctx.saved_tensors
        return grad * cos, None, None


class FusedSwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b  # reads a and b, writes silu(a)·b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        # one kernel reading grad, a and b and writing both gradients: two products' traffic
        return grad * b, grad * a


class FusedCrossEntropy(torch.autograd.Function):
    """Returns the mean loss; the logits' gradient is written in forward."""

    @staticmethod
    def forward(ctx, logits):
        gradient = logits.neg()  # one read of the bf16 logits, one bf16 write: the gradient
        ctx.save_for_backward(gradient)
        return gradient.view(-1)[:1].float().sum()

    @staticmethod
    def backward(ctx, grad):
        (gradient,) = ctx.saved_tensors
        return gradient * grad.to(gradient.dtype)


def rms_norm(x, weight, eps: float = 1e-5):
    return FusedRMSNorm.apply(x, weight, eps)
