"""The reference layer's feed-forward where the model is a mixture of experts (Mixtral,
Qwen3-MoE): what one GPU of an expert-parallel group computes and keeps, written as
scaletrain's dispatch runs it (`parallel/expert_dispatch.py`), so that the trace's FLOPs,
products and activations are the training step's:

- the router (a product of the tokens with its `experts` outputs), its softmax in fp32, the
  top-k choices and their weights renormalised (Mixtral's and Qwen3-MoE's routers);
- the (token, choice) rows sorted by expert and gathered: tokens × top-k rows of `hidden`;
- under expert parallel (ep > 1) the dispatch all-to-all — traced as a copy of the rows, so the
  received buffer is live as in training (its time is the all-to-all's,
  `costs/expert_parallel.py`; the copy's bytes, which NCCL's kernels move too, are counted
  once more as memory traffic: about 1% of a Mixtral layer) — and the rows regrouped expert by
  expert;
- each of the GPU's `experts ÷ ep` experts on its rows, one product after another (the gate
  and up projections together, SiLU(gate) × up, the down projection), with ROUTING_BALANCED:
  every expert receives the same number of rows, tokens × top-k × ep ÷ experts on this GPU
  (each GPU receives from its ep peers what its experts were chosen for); the busiest GPU's
  excess (`--expert-load`) is expert parallel's cost term;
- the outputs put back in the order received, combined back (ep > 1: the reverse
  all-to-all), in token order, weighted and summed over each token's choices.

Without expert parallel Hugging Face's own experts run (grouped_mm, one kernel for all the
experts' products of a projection): the same products, rows and kept tensors, without the
exchange and the regrouping — the trace costs each expert's products at its own rows either
way (a grouped kernel's tiles are those products).

Under tensor parallel the experts stay whole in every tensor-parallel process; with sequence
parallel each routes its own share of the sequence (no gather before the mixture: a token's
experts need no other token), so the experts' work is split, not repeated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: The assumption the trace makes of the router: every expert gets the same share of the rows.
ROUTING_BALANCED = True


def expert_rows(tokens: int, top_k: int, local_experts: int) -> list[int]:
    """Rows each of a GPU's `local_experts` experts computes, balanced: its tokens × top-k rows
    (what it receives from its expert-parallel peers, balanced) shared out as evenly as whole
    rows allow."""
    base, extra = divmod(tokens * top_k, local_experts)
    return [base + (1 if e < extra else 0) for e in range(local_experts)]


class _Exchange(torch.autograd.Function):
    """The all-to-all's buffer: a copy of the rows forward, of their gradient backward."""

    @staticmethod
    def forward(ctx, rows):
        return rows.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad.clone()


class Mixture(nn.Module):
    """`experts ÷ ep` gated SiLU experts of `expert_ffn` hidden units and the router, as one GPU
    holds them (see the module's text)."""

    def __init__(self, shape, ep: int):
        super().__init__()
        h, f = shape.hidden, shape.expert_ffn
        self.top_k, self.ep, self.local = shape.experts_per_token, ep, shape.experts // ep
        # the router and the experts stay bf16 under float8 (torchao converts nn.Linear layers
        # whose sizes divide by 16: not a router of 8 outputs, not stacked 3-D experts)
        self.router = nn.Parameter(torch.empty(shape.experts, h))
        self.gate_up = nn.Parameter(torch.empty(self.local, 2 * f, h))
        self.down = nn.Parameter(torch.empty(self.local, h, f))

    def forward(self, x):
        b, s, h = x.shape
        flat = x.reshape(b * s, h)
        probs = torch.softmax(F.linear(flat, self.router).float(), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        order = torch.argsort(chosen.reshape(-1), stable=True)
        rows = flat[order // self.top_k]
        if self.ep > 1:
            rows = _Exchange.apply(rows)
            regroup = torch.arange(rows.shape[0], device=rows.device)
            rows = rows[regroup]
        outputs = []
        for index, piece in enumerate(rows.split(expert_rows(b * s, self.top_k, self.local))):
            if piece.shape[0]:
                gate, up = F.linear(piece, self.gate_up[index]).chunk(2, dim=-1)
                outputs.append(F.linear(F.silu(gate) * up, self.down[index]))
        computed = torch.cat(outputs)
        if self.ep > 1:
            computed = _Exchange.apply(torch.empty_like(computed).index_copy(0, regroup, computed))
        per_choice = torch.empty_like(computed).index_copy(0, order, computed).view(b * s, self.top_k, h)
        combined = (per_choice * weights.unsqueeze(-1).to(per_choice.dtype)).sum(dim=1)
        return combined.view(b, s, h)


def token_sizes(shape, tokens: int, ep: int) -> tuple[int, ...]:
    """The sizes of a traced mixture's token-shaped dimensions for `tokens` routed tokens: the
    rows (tokens × top-k) and each expert's rows."""
    if not shape.experts:
        return ()
    rows = expert_rows(tokens, shape.experts_per_token, shape.experts // ep)
    return tuple(sorted({tokens, tokens * shape.experts_per_token, *(r for r in rows if r)}))
