"""Ring attention: exact attention over a sequence split across the processes of a group.

Each process holds a piece of every sequence's queries, keys and values (B, heads, T/cp,
head width). The keys and values travel round the ring — cp − 1 hops forward, each sent
while the current piece is being attended to, so the exchange hides behind attention's
compute — and each process attends its queries to every piece in turn. A piece's partial
result is merged by its log-sum-exp: with o₁, l₁ and o₂, l₂ the outputs and log-sum-exps
of two disjoint sets of keys, the attention over both is

    l = log(e^l₁ + e^l₂),   o = e^(l₁ − l) o₁ + e^(l₂ − l) o₂,

which is what one process attending to the whole sequence computes, to round-off.

Causal attention assumes the load-balanced split (`sequence_split.py`): the sequence cut
into 2·cp chunks and process i holding chunks i and 2·cp − 1 − i. Then every step costs
every process the same: its own piece causally; a piece from a process before it, all its
queries against that piece's first chunk; a piece from a process after it, its second chunk
of queries against the whole piece (the rest is in the future and masked out).

Backward walks the ring again: each step's gradients come from the attention kernel's own
backward given the final output and log-sum-exp (the probabilities of a block are
exp(s − l) with the whole row's l), and the keys' and values' gradients travel round with
an accumulator that returns to their owner after the last hop.

The kernels are torch's: on a CPU `_scaled_dot_product_flash_attention_for_cpu` (it returns
the log-sum-exp) and its backward; on CUDA the memory-efficient kernel (any dtype) and its
backward. The exchange is point-to-point (`batch_isend_irecv`) on any backend; a Gloo group
carrying CUDA tensors goes through host memory.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from ..flops import whole_work
from .eager_only import eager_only

aten = torch.ops.aten
KEYS_AND_VALUES, GRADIENTS = 1, 2  # the exchanges' tags


# -- one block of attention and its backward, by device --------------------------------------
def block_attention(q, k, v, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(output in q's dtype, log-sum-exp in float32 (B, H, Tq)) of q against k, v."""
    if q.device.type == "cuda":
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out, lse = aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal, scale=scale)[:2]
        return out, lse[..., : q.shape[2]]  # the kernel pads its log-sum-exp to a multiple of 32
    return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)


def block_backward(grad, q, k, v, out, lse, causal: bool, scale: float):
    """(dq, dk, dv) of one block, given the whole row's output and log-sum-exp."""
    if q.device.type == "cuda":
        pad = (-lse.shape[-1]) % 32
        lse = torch.nn.functional.pad(lse, (0, pad)) if pad else lse
        zero = torch.zeros((), dtype=torch.int64, device=q.device)  # the dropout's seed and offset: no dropout
        grad, q, k, v, out = (t.contiguous() for t in (grad, q, k, v, out))
        return aten._scaled_dot_product_efficient_attention_backward(
            grad, q, k, v, None, out, lse.contiguous(), zero, zero, 0.0, [True, True, True, False], causal,
            scale=scale)[:3]
    return aten._scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, out, lse, 0.0, causal,
                                                                      scale=scale)


# -- the exchange ---------------------------------------------------------------------------
class Exchange:
    """Sends a tensor to the next process of the ring while receiving the previous one's.
    (`rank` and `size` place this process on the ring; the ring's steps read them.)"""

    def __init__(self, group: Optional[dist.ProcessGroup]):
        self.group = group
        self.rank, self.size = rank, size = dist.get_rank(group), dist.get_world_size(group)
        self.next = dist.get_global_rank(group, (rank + 1) % size) if group is not None else (rank + 1) % size
        self.prev = dist.get_global_rank(group, (rank - 1) % size) if group is not None else (rank - 1) % size
        self.staged = dist.get_backend(group) == "gloo"

    def start(self, tensor: torch.Tensor, tag: int) -> "_Pending":
        """`tag` keeps two exchanges in flight between the same processes apart."""
        device = tensor.device
        outgoing = tensor.contiguous()
        if self.staged and device.type != "cpu":  # Gloo sends host memory
            outgoing = outgoing.cpu()
        incoming = torch.empty_like(outgoing)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, self.next, self.group, tag),
                                        dist.P2POp(dist.irecv, incoming, self.prev, self.group, tag)])
        return _Pending(works, incoming, outgoing, device)


class _Pending:
    def __init__(self, works, incoming, outgoing, device):
        self.works, self.incoming, self.outgoing, self.device = works, incoming, outgoing, device

    def wait(self) -> torch.Tensor:
        for work in self.works:
            work.wait()
        return self.incoming.to(self.device, non_blocking=True)


def _pack(*tensors: torch.Tensor) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _unpack(flat: torch.Tensor, like: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    pieces, start = [], 0
    for t in like:
        pieces.append(flat[start:start + t.numel()].view(t.shape))
        start += t.numel()
    return pieces


# -- which part of a block a step computes ----------------------------------------------------
def step_rows_and_keys(step: int, rank: int, size: int, length: int, causal: bool):
    """For the keys and values that came from process (rank − step) mod size: (which query
    rows attend, which key rows they attend to, whether causally), as slices of the local
    pieces of `length` rows. Under the load-balanced split a process after this one holds
    only future keys for the first chunk of queries, and one before it only past keys in its
    first chunk (its second chunk lies after both of this process's)."""
    every = slice(0, length)
    if not causal:
        return every, every, False
    if step == 0:
        return every, every, True
    source = (rank - step) % size
    half = length // 2
    if source < rank:
        return every, slice(0, half), False
    return slice(half, length), every, False


def _expand_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention: each key/value head serves heads ÷ kv_heads query heads."""
    return t if t.shape[1] == heads else t.repeat_interleave(heads // t.shape[1], dim=1)


def _fold_heads(grad: torch.Tensor, kv_heads: int) -> torch.Tensor:
    if grad.shape[1] == kv_heads:
        return grad
    b, h, t, d = grad.shape
    return grad.view(b, kv_heads, h // kv_heads, t, d).sum(2)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, exchange, scale, causal):
        with whole_work.attention(*_whole(q, v, exchange.size)):  # counted as the whole sequence's
            return _RingAttention._forward(ctx, q, k, v, exchange, scale, causal)

    @staticmethod
    def _forward(ctx, q, k, v, exchange, scale, causal):
        rank, size = exchange.rank, exchange.size
        heads, length = q.shape[1], q.shape[2]
        out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        lse = torch.full(q.shape[:3], float("-inf"), dtype=torch.float32, device=q.device)
        kv = (k, v)
        for step in range(size):
            pending = exchange.start(_pack(*kv), KEYS_AND_VALUES) if step < size - 1 else None
            rows, keys, block_causal = step_rows_and_keys(step, rank, size, length, causal)
            k_here, v_here = (_expand_heads(t[:, :, keys], heads) for t in kv)
            o_b, l_b = block_attention(q[:, :, rows], k_here, v_here, block_causal, scale)
            _merge(out, lse, rows, o_b, l_b)
            if pending is not None:
                kv = tuple(_unpack(pending.wait(), kv))
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.exchange, ctx.scale, ctx.causal = exchange, scale, causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        saved = ctx.saved_tensors  # once: under activation checkpointing a second read is refused
        with whole_work.attention(*_whole(saved[0], saved[2], ctx.exchange.size), backward=True):
            return _RingAttention._backward(ctx, grad_out, saved)

    @staticmethod
    def _backward(ctx, grad_out, saved):
        q, k, v, out, lse = saved
        exchange, scale, causal = ctx.exchange, ctx.scale, ctx.causal
        rank, size = exchange.rank, exchange.size
        heads, length = q.shape[1], q.shape[2]
        grad_out = grad_out.contiguous().to(q.dtype)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        kv = (k, v)
        acc = torch.zeros(k.numel() + v.numel(), dtype=torch.float32, device=q.device)  # dk, dv of the piece held
        acc_pending = None
        for step in range(size):
            kv_pending = exchange.start(_pack(*kv), KEYS_AND_VALUES) if step < size - 1 else None
            if acc_pending is not None:  # the accumulator of the piece now held, from the process before
                acc = acc_pending.wait()
            rows, keys, block_causal = step_rows_and_keys(step, rank, size, length, causal)
            k_here, v_here = (_expand_heads(t[:, :, keys], heads) for t in kv)
            dq_b, dk_b, dv_b = block_backward(grad_out[:, :, rows], q[:, :, rows], k_here, v_here, out[:, :, rows],
                                              lse[:, :, rows], block_causal, scale)
            dq[:, :, rows] += dq_b
            dk, dv = _unpack(acc, kv)
            dk[:, :, keys] += _fold_heads(dk_b, k.shape[1])
            dv[:, :, keys] += _fold_heads(dv_b, v.shape[1])
            acc_pending = exchange.start(acc, GRADIENTS)  # on to the next holder; after the last hop, home
            if kv_pending is not None:
                kv = tuple(_unpack(kv_pending.wait(), kv))
        dk, dv = _unpack(acc_pending.wait(), (k, v))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def _whole(q: torch.Tensor, v: torch.Tensor, size: int) -> tuple:
    """(batch, query heads, this process's queries, the whole sequence's keys, widths): the
    attention the ring computes in pieces."""
    return q.shape[0], q.shape[1], q.shape[2], q.shape[2] * size, q.shape[3], v.shape[3]


def _merge(out: torch.Tensor, lse: torch.Tensor, rows: slice, o_b: torch.Tensor, l_b: torch.Tensor) -> None:
    """Folds one block's partial attention into the running (out, lse), in place."""
    l_old = lse[:, :, rows]
    l_new = torch.logaddexp(l_old, l_b)
    # A row with no keys yet has l_old = -inf: its weight exp(-inf) is 0, as it should be.
    out[:, :, rows] = out[:, :, rows] * torch.exp(l_old - l_new).unsqueeze(-1) + \
        o_b.float() * torch.exp(l_b - l_new).unsqueeze(-1)
    lse[:, :, rows] = l_new


@eager_only
def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: Optional[dist.ProcessGroup], *,
                   causal: bool = True, scale: Optional[float] = None, exchange=None) -> torch.Tensor:
    """Attention of the local queries (B, H, T/cp, D) to the whole sequence's keys and
    values, whose local pieces (B, H_kv, T/cp, D) are `k` and `v` (H_kv divides H: grouped
    queries), over the processes of `group` (None: the whole world). Causal attention
    assumes the load-balanced split. Differentiable; exact to round-off. (`exchange`: what
    passes the pieces on instead of `group`'s `Exchange` — the plan's probe times a ring
    process's arithmetic with one that sends nothing.)"""
    if scale is None:
        scale = q.shape[-1] ** -0.5
    return _RingAttention.apply(q, k, v, exchange or Exchange(group), float(scale), bool(causal))
