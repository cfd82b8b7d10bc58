"""The loss by implementation, in time and memory, per element of this GPU's logits (tokens ×
vocabulary ÷ tp, bf16):

- `eager` — `cross_entropy(logits.float())`, Hugging Face's and torchtitan's: traced as torch
  runs it (an fp32 copy, fp32 log-softmax kept for backward, fp32 gradients): at its peak 6 ×
  the bf16 logits live where the model drops them (torchtitan), 7–8 × where it returns them
  (Hugging Face);
- `fused` — one kernel reads the bf16 logits and writes their bf16 gradient in forward,
  backward scales it (flash-attn's, Liger's, Megatron-LM's): traced with that kernel's traffic
  (`fused_kernels.FusedCrossEntropy`); the logits and their gradient live, 2 ×;
- `chunked` — scaletrain's (`data/lm_loss.py`): the tokens cut into chunks of CHUNK_ELEMENTS
  logits; forward upcasts one chunk at a time and keeps each token's log-sum-exp, backward
  computes each chunk's gradient (softmax − one-hot) from the logits and writes it into the
  logits' bf16 gradient. Autograd keeps the bf16 logits, so the logits and their gradient are
  what lives (2 ×), with one chunk's fp32 upcast and probabilities (8 bytes an element of a
  chunk). Traced as the fused kernel (the same 2 × live); what it does beyond that is added
  here: each chunk's cast (read 2 bytes an element, write 4) and log-sum-exp (read 4) in
  forward (10 bytes, 4 kernels a chunk); in backward the cast again, the probabilities
  (read 4, write 4), their scaling (read 4, write 4) and the copy into the gradient (read 4,
  write 2) (28 bytes, 6 kernels a chunk); less the fused kernel's 4 bytes in each phase already
  traced (its few kernels are left in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Logits per chunk of scaletrain's chunked cross-entropy: the loss's own constant, so that the
# plan costs the chunks the run really makes.
from ...data.lm_loss import CHUNK_ELEMENTS

#: Bytes moved per logits element beyond the fused kernel traced, and kernels per chunk, by phase.
CHUNKED_FORWARD_BYTES, CHUNKED_FORWARD_KERNELS = 10.0 - 4.0, 4
CHUNKED_BACKWARD_BYTES, CHUNKED_BACKWARD_KERNELS = 28.0 - 4.0, 6
#: fp32 bytes per element of the one chunk live (its upcast and its probabilities).
CHUNK_LIVE_BYTES = 8.0


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
    chunk_tokens = max(1, CHUNK_ELEMENTS // vocab_shard)
    chunks = math.ceil(tokens / chunk_tokens)
    return LossExtra(CHUNKED_FORWARD_BYTES * elements, CHUNKED_FORWARD_KERNELS * chunks,
                     CHUNKED_BACKWARD_BYTES * elements, CHUNKED_BACKWARD_KERNELS * chunks,
                     CHUNK_LIVE_BYTES * min(tokens, chunk_tokens) * vocab_shard)


def loss_seconds(extra: LossExtra, profile, efficiency: float) -> tuple:
    """(forward, backward) seconds of the extra memory-bound work."""
    return (profile.memory_seconds(extra.forward_bytes, extra.forward_kernels) / efficiency,
            profile.memory_seconds(extra.backward_bytes, extra.backward_kernels) / efficiency)
