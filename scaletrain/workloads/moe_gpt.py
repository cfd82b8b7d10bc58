"""The built-in mixture of experts: the byte-level GPT of gpt.py with each block's feed-forward
replaced by experts and a router (`stdlib-moe`: 8 experts, each token to 2 of them).

The experts are stored as Hugging Face's Mixtral and Qwen3-MoE store theirs — two stacked 3-D
weights, `gate_up_proj` (experts, 2 × hidden, width) and `down_proj` (experts, width, hidden),
called as `experts(hidden_states, top_k_index, top_k_weights)` — so expert parallel treats
the built-in and a user's Hugging Face mixture alike (parallel/experts.py).

The router's auxiliary loss keeps the experts in use: a sequence-wise balance loss (as
DeepSeek-V3's), in each layer the sum over experts of f_e × P_e for every sequence — f_e the
share of the sequence's token choices that went to expert e, times the number of experts over
top-k, P_e the router's mean probability for e over the sequence (1 when balanced) — averaged
over the sequences and the layers, times `BALANCE_COEF`. A loss per sequence is a mean over
samples: the mean of the data-parallel processes' losses is the loss of their global batch, so
training on many processes equals training on one (a balance loss over each process's whole
batch, as Switch and Hugging Face compute theirs, would depend on how the batch is split). The
model returns `MoEOutput(logits, aux_loss)` in training (aux_loss None in evaluation); the
language-model task adds `aux_loss` to the cross-entropy (tasks.py)."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .gpt import Attention, Embedding, Head
from .text import CONTEXT

EXPERTS = 8
TOP_K = 2
BALANCE_COEF = 0.01


class MoEOutput(NamedTuple):
    """What the built-in mixture returns: the logits, and (training only) the balance loss."""
    logits: torch.Tensor
    aux_loss: Optional[torch.Tensor]


class Experts(nn.Module):
    """Every expert's gated feed-forward, stacked (the layout of Hugging Face's MixtralExperts)."""

    def __init__(self, experts: int, width: int, hidden: int):
        super().__init__()
        self.num_experts = experts
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * hidden, width))
        self.down_proj = nn.Parameter(torch.empty(experts, width, hidden))
        self.act_fn = nn.SiLU()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.gate_up_proj, std=0.02)
        nn.init.normal_(self.down_proj, std=0.02)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for expert in top_k_index.unique().tolist():
            token, choice = torch.where(top_k_index == expert)
            gate, up = F.linear(hidden_states[token], self.gate_up_proj[expert]).chunk(2, dim=-1)
            computed = F.linear(self.act_fn(gate) * up, self.down_proj[expert])
            out.index_add_(0, token, computed * top_k_weights[token, choice, None].to(computed.dtype))
        return out


class MoEFeedForward(nn.Module):
    """The router (a linear layer: each token's probabilities over the experts, the top-k
    taken and their weights renormalised) and the experts; keeps the layer's balance loss
    of its last training forward."""

    def __init__(self, width: int, experts: int = EXPERTS, top_k: int = TOP_K, hidden: Optional[int] = None):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(width, experts, bias=False)
        self.experts = Experts(experts, width, hidden or 2 * width)
        self.balance: Optional[torch.Tensor] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, width = x.shape
        flat = x.reshape(-1, width)
        probabilities = F.softmax(self.gate(flat).float(), dim=-1)
        weights, chosen = torch.topk(probabilities, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        self.balance = sequence_balance(probabilities.view(b, t, -1), chosen.view(b, t, -1)) if self.training else None
        return self.experts(flat, chosen, weights.to(x.dtype)).view(b, t, width)


def sequence_balance(probabilities: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """The sequence-wise balance loss of one layer: mean over sequences of Σ_e f_e × P_e
    (probabilities (batch, tokens, experts), chosen (batch, tokens, top-k))."""
    experts = probabilities.shape[-1]
    picks = F.one_hot(chosen, experts).sum(2).float()  # (batch, tokens, experts): 1 where chosen
    share = picks.mean(1) * experts / chosen.shape[-1]  # f_e: 1 for every expert when balanced
    return (share * probabilities.mean(1)).sum(-1).mean()


class MoEBlock(Attention):
    """Pre-norm causal self-attention (gpt.py's) and the mixture of experts, each added to the
    residual stream. Tensor parallel splits attention's heads; the router and the experts stay
    whole."""

    def __init__(self, width: int, heads: int, experts: int = EXPERTS, top_k: int = TOP_K):
        super().__init__(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.moe = MoEFeedForward(width, experts, top_k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attend(x)
        return x + self.moe(self.norm2(x))


class MoEGPT(nn.Sequential):
    """Embedding, mixture-of-experts blocks, head — an `nn.Sequential`, as gpt.py's model, so
    that FSDP shards it block by block and the plan's probe measures it unit by unit; its
    forward returns `MoEOutput`."""

    def __init__(self, width: int = 64, layers: int = 2, heads: int = 4, experts: int = EXPERTS, top_k: int = TOP_K,
                 context: int = CONTEXT, balance_coef: float = BALANCE_COEF):
        super().__init__(Embedding(width, context), *[MoEBlock(width, heads, experts, top_k) for _ in range(layers)],
                         Head(width))
        self.balance_coef = balance_coef

    def forward(self, ids: torch.Tensor) -> MoEOutput:
        logits = super().forward(ids)
        if not self.training:
            return MoEOutput(logits, None)
        balance = torch.stack([block.moe.balance for block in self if isinstance(block, MoEBlock)]).mean()
        return MoEOutput(logits, self.balance_coef * balance)


def byte_moe(width: int = 64, layers: int = 2, heads: int = 4, experts: int = EXPERTS, top_k: int = TOP_K,
             context: int = CONTEXT) -> MoEGPT:
    return MoEGPT(width, layers, heads, experts, top_k, context)
