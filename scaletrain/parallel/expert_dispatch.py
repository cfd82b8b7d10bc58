"""Tokens to their experts and back across an expert-parallel group, by all-to-all, dropless.

Each of the group's `ep` processes holds `experts ÷ ep` consecutive experts (process i the
i-th block) and routes its own tokens. For one mixture-of-experts layer's forward:

1. every (token, choice) pair of this process — tokens × top-k of them — is sorted by the
   expert chosen (stably: a token's choices keep their order), and the count each expert gets
   from this process is exchanged (one all-to-all of `experts` integers), so that every process
   knows how many rows it sends each peer and receives from each;
2. dispatch: the sorted rows go to the processes holding their experts (one all-to-all of
   uneven pieces);
3. the process computes its experts on the rows it received, grouped expert by expert (every
   row whatever the load: nothing is dropped for want of capacity, so the result is the one
   process's);
4. combine: the outputs go back where their rows came from (the reverse all-to-all), are put
   back in token order, weighted by the router's weights and summed over each token's choices.

Backward runs the two all-to-alls in reverse (`AllToAll`), so each expert's gradient sums
every token that reached it, whichever process routed it. Gloo (CPU) and NCCL (GPU) both do
`all_to_all_single` with uneven splits; the counts travel in their own small all-to-all, and
their totals — the pieces' sizes — are read on the host (one synchronisation per layer, as
every dropless implementation has).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .eager_only import eager_only


class AllToAll(torch.autograd.Function):
    """`all_to_all_single` with uneven pieces, differentiable: backward sends the gradients
    back the way the rows came."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, received: list, sent: list, group) -> torch.Tensor:
        ctx.received, ctx.sent, ctx.group = received, sent, group
        out = rows.new_empty((sum(received), *rows.shape[1:]))
        dist.all_to_all_single(out, rows.contiguous(), received, sent, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        back = grad.new_empty((sum(ctx.sent), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), ctx.sent, ctx.received, group=ctx.group)
        return back, None, None, None


def local(weight: torch.Tensor) -> torch.Tensor:
    """This process's experts of a stacked weight (a DTensor's local part, differentiably)."""
    to_local = getattr(weight, "to_local", None)
    return to_local() if callable(to_local) else weight


def compute_experts(experts: nn.Module, rows: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Each local expert on its consecutive rows (`sizes[e]` of them): the gate and up
    projections, the activation of the gate times the up, the down projection — the
    arithmetic of Hugging Face's eager experts, expert by expert."""
    gate_up, down = local(experts.gate_up_proj), local(experts.down_proj)
    outputs = []
    for index, piece in enumerate(rows.split(sizes)):
        if piece.shape[0]:
            gate, up = F.linear(piece, gate_up[index]).chunk(2, dim=-1)
            outputs.append(F.linear(experts.act_fn(gate) * up, down[index]))
    if not outputs:
        # No row reached these experts this step: their weights still take part (a gradient
        # of zeros, as one process's stacked weight gets for experts nobody chose).
        return rows.new_zeros((0, down.shape[1])) + 0 * (gate_up.reshape(-1)[0] + down.reshape(-1)[0])
    return torch.cat(outputs)


def _grouping(counts: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """The rows received, [peer][local expert] blocks of `counts` rows each, as an order that
    groups them expert by expert (every peer's rows for expert 0, then for expert 1, ...), and
    each expert's rows in all."""
    peers, experts = counts.shape
    table = counts.tolist()
    starts, position = [], 0
    for peer in range(peers):
        row = []
        for expert in range(experts):
            row.append(position)
            position += table[peer][expert]
        starts.append(row)
    order = [i for expert in range(experts) for peer in range(peers)
             for i in range(starts[peer][expert], starts[peer][expert] + table[peer][expert])]
    return torch.tensor(order, dtype=torch.long, device=counts.device), counts.sum(0).tolist()


@eager_only
def dispatch_and_combine(experts: nn.Module, hidden: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor, group: Optional[dist.ProcessGroup], ep: int) -> torch.Tensor:
    """The experts' output for this process's tokens `hidden` (tokens, width), computed where
    each expert lives (see the module's text)."""
    experts_in_all = int(experts.gate_up_proj.shape[0])  # the global count, DTensor or not
    per_process = experts_in_all // ep
    tokens, top_k = top_k_index.shape
    chosen = top_k_index.reshape(-1)
    order = torch.argsort(chosen, stable=True)
    counts = torch.bincount(chosen, minlength=experts_in_all)
    # ep 1 (the planner's probe times the bookkeeping alone so): every row stays here.
    exchange = AllToAll.apply if ep > 1 else lambda rows, *_: rows
    received_counts = torch.empty_like(counts)
    if ep > 1:
        dist.all_to_all_single(received_counts, counts, group=group)  # [peer][my expert], even pieces
    else:
        received_counts = counts
    received_counts = received_counts.view(ep, per_process)
    sent = counts.view(ep, per_process).sum(1).tolist()
    received = received_counts.sum(1).tolist()
    rows = exchange(hidden[order // top_k], received, sent, group)
    grouped, sizes = _grouping(received_counts)
    computed = compute_experts(experts, rows[grouped], sizes)
    outputs = torch.empty_like(computed).index_copy(0, grouped, computed)  # back in the order received
    returned = exchange(outputs, sent, received, group)
    per_choice = torch.empty_like(returned).index_copy(0, order, returned).view(tokens, top_k, -1)
    weighted = per_choice * top_k_weights.unsqueeze(-1).to(per_choice.dtype)
    return weighted.sum(1).to(hidden.dtype)
