"""The loss by implementation, in time and memory, per element of this GPU's logits (tokens ×
vocabulary ÷ tp, bf16):

- `eager` — `cross_entropy(logits.float())`, Hugging Face's and torchtitan's: traced as torch
  runs it (an fp32 copy, fp32 log-softmax kept for backward, fp32 gradients): at its peak about
  8 × the bf16 logits live;
- `fused` — one kernel reads the bf16 logits and writes their bf16 gradient in forward,
  backward scales it (flash-attn's, Liger's, Megatron-LM's): traced with that kernel's traffic
  (`fused_kernels.FusedCrossEntropy`); the logits and their gradient live, 2 ×;
- `chunked` — scaletrain's: the cross-entropy computed a chunk of CHUNK_TOKENS tokens at a time,
  upcast per chunk, under activation checkpointing, so that only one chunk's fp32 tensors ever
  live beside the bf16 logits and their bf16 gradient. Traced as the fused kernel (the same
  2 × live); what it does beyond that is added here from first principles: each chunk's cast
  (read 2 bytes, write 4), log-softmax (read 4, write 4) and the loss's gather in forward
  (14 bytes an element, 3 kernels); in backward the same again (checkpointing recomputes
  them), the loss's gradient (write 4), log-softmax's backward (read 8, write 4) and the cast
  back to bf16 (read 4, write 2) (36 bytes, 7 kernels); less the fused kernel's 4 bytes in
  each phase already traced (its few kernels are left in). Its one live chunk holds log-softmax's output, the loss's gradient
  and log-softmax's gradient in fp32: 12 bytes an element of CHUNK_TOKENS × vocabulary ÷ tp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Tokens per chunk of scaletrain's chunked cross-entropy.
CHUNK_TOKENS = 1024

#: Bytes moved per logits element beyond the fused kernel traced, and kernels per chunk, by phase.
CHUNKED_FORWARD_BYTES, CHUNKED_FORWARD_KERNELS = 14.0 - 4.0, 3
CHUNKED_BACKWARD_BYTES, CHUNKED_BACKWARD_KERNELS = 36.0 - 4.0, 7
#: fp32 bytes per element of the one chunk live.
CHUNK_LIVE_BYTES = 12.0


@dataclass(frozen=True)
class LossExtra:
    """What a loss implementation adds to the traced step (see the module's docstring)."""
    forward_bytes: float = 0.0
    forward_kernels: int = 0
    backward_bytes: float = 0.0
    backward_kernels: int = 0
    live_bytes: float = 0.0


def traced_as(loss: str) -> str:
    """The loss the reference model is traced with (`reference.Layout.loss`)."""
    return "eager" if loss == "eager" else "fused"


def loss_extra(loss: str, tokens: int, vocab_shard: int) -> LossExtra:
    """Beyond the trace, for `tokens` tokens of this GPU at a vocabulary shard of `vocab_shard`."""
    if loss != "chunked":
        return LossExtra()
    elements = float(tokens) * vocab_shard
    chunks = math.ceil(tokens / CHUNK_TOKENS)
    return LossExtra(CHUNKED_FORWARD_BYTES * elements, CHUNKED_FORWARD_KERNELS * chunks,
                     CHUNKED_BACKWARD_BYTES * elements, CHUNKED_BACKWARD_KERNELS * chunks,
                     CHUNK_LIVE_BYTES * min(tokens, CHUNK_TOKENS) * vocab_shard)


def loss_seconds(extra: LossExtra, profile, efficiency: float) -> tuple:
    """(forward, backward) seconds of the extra memory-bound work."""
    return (profile.memory_seconds(extra.forward_bytes, extra.forward_kernels) / efficiency,
            profile.memory_seconds(extra.backward_bytes, extra.backward_kernels) / efficiency)
