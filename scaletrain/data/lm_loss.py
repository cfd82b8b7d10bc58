"""A language model's cross-entropy that never holds the whole float32 logits at once.

The usual loss, `F.cross_entropy(logits.float(), targets)`, makes a float32 copy of every
logit (tokens × vocabulary × 4 bytes: 3.9 GiB for 8,192 tokens of a 128,256-token vocabulary)
and keeps its float32 log-probabilities, as large again, until backward, where their
gradient and the logits' make two more. Here the tokens are cut into chunks: forward upcasts
one chunk at a time and keeps only each token's log-sum-exp; backward computes each chunk's
gradient (softmax − one-hot) from the logits and writes it into the logits' gradient. What
autograd keeps is the logits as the model made them (bf16 under mixed precision) and one
number per token. The value is the plain loss's to float round-off (a sum in another
order); the gradients too.

`cross_entropy` is the drop-in loss; `causal_lm_loss` is a Hugging Face causal language
model's own (transformers' `ForCausalLMLoss`: labels shifted by one, -100 ignored, the mean
over counted tokens or the sum ÷ `num_items_in_batch`), for models whose loss scaletrain
computes from their logits instead of letting them (parallel/lm_loss.py).

Chunking is on inside `chunking(True)` (a training step of a run whose `chunked_loss` is on)
and off elsewhere: evaluation, or a step with `chunked_loss=False`.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # transformers' label for positions that do not count
#: Logits per chunk (tokens × vocabulary): 128 MiB of float32 at most, e.g. 256 tokens of a
#: 128k vocabulary (32 chunks of a sequence of 8,192), 1,024 of a 32k one.
CHUNK_ELEMENTS = 2 ** 25
_chunking = False


@contextlib.contextmanager
def chunking(enabled: bool):
    """Inside: `cross_entropy` chunks (when `enabled`)."""
    global _chunking
    before, _chunking = _chunking, bool(enabled)
    try:
        yield
    finally:
        _chunking = before


def is_chunking() -> bool:
    return _chunking


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Σ cross-entropy of logits (N, V) against targets (N,), a chunk of rows at a time: forward
    keeps each row's log-sum-exp (N floats) beside the logits autograd holds anyway; backward
    writes each chunk's gradient, softmax − one-hot, straight into the one gradient tensor."""

    @staticmethod
    def forward(ctx, logits, targets, ignore_index: int, chunk: int):
        total = torch.zeros((), dtype=torch.float32, device=logits.device)
        lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for start in range(0, logits.shape[0], chunk):
            rows = logits[start:start + chunk].float()
            wanted = targets[start:start + chunk]
            counted = wanted != ignore_index
            lse[start:start + chunk] = row_lse = torch.logsumexp(rows, dim=-1)
            picked = rows.gather(1, torch.where(counted, wanted, 0).unsqueeze(1)).squeeze(1)
            total += torch.where(counted, row_lse - picked, 0.0).sum()
        ctx.save_for_backward(logits, targets, lse)
        ctx.ignore_index, ctx.chunk = ignore_index, chunk
        return total

    @staticmethod
    def backward(ctx, grad_total):
        logits, targets, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ctx.chunk):
            rows = logits[start:start + ctx.chunk].float()
            wanted = targets[start:start + ctx.chunk]
            counted = wanted != ctx.ignore_index
            probabilities = (rows - lse[start:start + ctx.chunk].unsqueeze(1)).exp_()  # one chunk's float32
            probabilities.scatter_add_(1, torch.where(counted, wanted, 0).unsqueeze(1),
                                       -torch.ones_like(probabilities[:, :1]))
            probabilities *= (counted.unsqueeze(1) * grad_total)
            grad[start:start + ctx.chunk] = probabilities
        return grad, None, None, None


def cross_entropy_sum(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX,
                      chunked: Optional[bool] = None) -> torch.Tensor:
    """Σ cross-entropy (float32) of `logits` (..., V) against `targets` (...), positions whose
    target is `ignore_index` left out; chunked over tokens where `chunked` (default: inside
    `chunking(True)`) and the step needs gradients."""
    vocab = logits.shape[-1]
    flat, wanted = logits.reshape(-1, vocab), targets.reshape(-1).to(logits.device)
    chunk = max(1, CHUNK_ELEMENTS // vocab)
    chunked = _chunking if chunked is None else chunked
    if not chunked or flat.shape[0] <= chunk or not torch.is_grad_enabled() or not flat.requires_grad:
        return F.cross_entropy(flat.float(), wanted, ignore_index=ignore_index, reduction="sum")
    return _ChunkedCrossEntropy.apply(flat, wanted, ignore_index, chunk)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX,
                  chunked: Optional[bool] = None) -> torch.Tensor:
    """`F.cross_entropy(logits.float(), targets)` over every position (mean over the counted
    ones), chunked as `cross_entropy_sum`."""
    counted = (targets != ignore_index).sum().to(logits.device)
    return cross_entropy_sum(logits, targets, ignore_index, chunked) / counted


def causal_lm_loss(logits: torch.Tensor, labels: Optional[torch.Tensor] = None,
                   shift_labels: Optional[torch.Tensor] = None, num_items_in_batch=None,
                   ignore_index: int = IGNORE_INDEX, chunked: Optional[bool] = None) -> torch.Tensor:
    """transformers' causal language-model loss (`ForCausalLMLoss`): position t predicts label
    t + 1 (`shift_labels`, when given, are already shifted), `ignore_index` does not count; the
    mean over the counted positions, or the sum ÷ `num_items_in_batch` where given."""
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    total = cross_entropy_sum(logits, shift_labels, ignore_index, chunked)
    if num_items_in_batch is not None:
        return total / torch.as_tensor(num_items_in_batch, device=total.device)
    return total / (shift_labels != ignore_index).sum().to(total.device)
