"""A small GPT-style byte-level language model, written as an `nn.Sequential` of blocks
(embedding, transformer blocks, head) so that every strategy can take it: ddp and fsdp as
any model (fsdp shards block by block), mp and pipeline by cutting the sequence between
blocks (what passes between stages is one activation tensor), tensor parallel by its
blocks' `tp_plan` (attention heads and MLP hidden units split across processes), context
parallel by its attention (torch's scaled_dot_product_attention, sent round the ring) and its
positions (`token_positions`: those of the part of the sequence a process holds)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..data.lm_loss import cross_entropy
from ..parallel.cp_attention import token_positions
from .text import CONTEXT

VOCAB = 256  # bytes


class Embedding(nn.Module):
    def __init__(self, width: int, context: int = CONTEXT):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, width)
        self.positions = nn.Parameter(torch.empty(context, width))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Its own parameter (the token table initialises itself): what a model built on the
        meta device runs again once its memory exists."""
        nn.init.normal_(self.positions, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # The positions of the tokens this process holds: 0, 1, … or, with the sequence split
        # by context parallel, those of its part.
        return self.tokens(ids) + self.positions[token_positions(ids.shape[1], ids.device)]


class Attention(nn.Module):
    """Pre-norm causal self-attention, added to the residual stream (a block's first half).

    The qkv projection's outputs are grouped by head ([q k v] of head 0, then of head 1, ...)
    so that tensor parallel's column split gives each process whole heads: the forward
    counts the heads it finds (all of them, or its share) instead of assuming them."""

    #: Tensor parallel: heads split by columns, the projection back by rows.
    tp_plan = {"qkv": "colwise", "proj": "rowwise"}

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads, self.head_width = heads, width // heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, -1, 3, self.head_width).permute(3, 0, 2, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(attended.transpose(1, 2).reshape(b, t, -1))


class Block(Attention):
    """Pre-norm causal self-attention and MLP, each added to the residual stream."""

    #: Tensor parallel: heads and hidden units split by columns, the projections back by rows.
    tp_plan = {**Attention.tp_plan, "mlp.0": "colwise", "mlp.2": "rowwise"}

    def __init__(self, width: int, heads: int):
        super().__init__(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attend(x)
        return x + self.mlp(self.norm2(x))


class Head(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm, self.out = nn.LayerNorm(width), nn.Linear(width, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


def byte_gpt(width: int = 96, layers: int = 3, heads: int = 4, context: int = CONTEXT) -> nn.Sequential:
    """The model for sequences of up to `context` tokens (the size of its position table)."""
    return nn.Sequential(Embedding(width, context), *[Block(width, heads) for _ in range(layers)], Head(width))


def lm_loss(output, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every position (logits (B, T, V), or a model output holding them as
    `.logits`, as a Hugging Face causal LM returns; targets (B, T)): a chunk of tokens at a
    time in a training step whose `chunked_loss` is on (data/lm_loss.py)."""
    logits = getattr(output, "logits", output)
    return cross_entropy(logits, targets.to(logits.device))
