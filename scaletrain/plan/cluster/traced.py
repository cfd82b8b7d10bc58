"""The reference model traced under fake tensors, once with one decoder layer and once with
two: the difference is one layer, the rest is the embedding, the head and the loss. Traced
at a micro-batch of TRACE_MB sequences, so that every tensor and product whose size counts
tokens can be told apart from the weights' and scaled to any micro-batch exactly (FLOPs,
bytes and activations of a transformer are linear in the batch).

A trace keeps, per operator: its kind, phase, FLOPs, product shape, and the bytes it reads
and writes split into token-shaped and not; for `--compile`, the bytes a fusing compiler
still moves (the tensors entering and leaving each run of memory-bound operators between
two products, see `_fused`); and the device memory live as the step goes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from ...flops import TraceMode
from ...workloads.model_shapes import ModelShape
from .mixture import token_sizes
from .reference import Layout, ReferenceLM

#: Sequences per traced micro-batch: 11 × any sequence length is no model's width, so a
#: dimension of that size is the tokens' (and 11 × a mixture's rows per sequence, its rows').
TRACE_MB = 11

REDUCTIONS = ("sum", "mean", "amax", "max", "softmax", "_softmax", "_log_softmax", "native_layer_norm",
              "native_layer_norm_backward", "_softmax_backward_data", "_log_softmax_backward_data", "nll_loss_forward",
              "nll_loss_backward", "var_mean", "norm", "embedding_dense_backward", "cumsum")


@dataclass(frozen=True)
class Variant:
    """What changes a traced layer: tensor-parallel degree, tokens per sequence on this GPU,
    activation checkpointing, float8, the attention kernel, the code's layout, and a mixture of
    experts' expert-parallel degree (the experts this GPU holds, the rows each computes)."""
    tp: int
    seq: int
    checkpointing: str = "none"  # none, full, selective (every product kept), selective-alternate
    float8: bool = False
    attention: str = "flash"
    sequence_parallel: bool = True  # with tp > 1: norms and the residual stream split along the sequence
    layout: Layout = Layout()
    ep: int = 1


@dataclass
class Costs:
    """One part (a layer, or what is not layers) of a step, at TRACE_MB, by phase."""
    matmuls: list = field(default_factory=list)  # (phase, m, n, k, batch, dtype, token dims: m?, n?, k?, batch?)
    attention: list = field(default_factory=list)  # (phase, counted flops, batch, seq_q, seq_k, causal, backward,
    #                                                  head_dim)
    memory: dict = field(default_factory=dict)  # (phase, eager|fused) -> [token bytes, other bytes, kernels]
    flops: dict = field(default_factory=dict)  # phase -> FLOPs
    saved: tuple = (0.0, 0.0)  # live after forward: (token bytes, other bytes)
    peak: list = field(default_factory=list)  # live during the step: [(token bytes, other bytes)]
    largest: tuple = (0.0, 0.0)  # the largest tensor: (token bytes, other bytes)


def _difference(two: Costs, one: Costs) -> Costs:
    layer = Costs()
    layer.matmuls = _list_minus(two.matmuls, one.matmuls)
    layer.attention = _list_minus(two.attention, one.attention)
    layer.memory = {k: [a - b for a, b in zip(v, one.memory.get(k, (0, 0, 0)))] for k, v in two.memory.items()}
    layer.flops = {k: v - one.flops.get(k, 0) for k, v in two.flops.items()}
    layer.saved = (two.saved[0] - one.saved[0], two.saved[1] - one.saved[1])
    return layer


def _list_minus(big: list, small: list) -> list:
    left = list(big)
    for item in small:
        if item in left:
            left.remove(item)
    return left


@functools.lru_cache(maxsize=256)
def trace(shape: ModelShape, variant: Variant) -> tuple:
    """(one layer, the rest, the one-layer model's Costs) for this variant."""
    one, two = _trace(shape, variant, 1), _trace(shape, variant, 2)
    layer = _difference(two, one)
    rest = _difference(one, layer)
    rest.peak, rest.largest = one.peak, one.largest
    return layer, rest, one


def _trace(shape: ModelShape, variant: Variant, layers: int) -> Costs:
    """On the meta device: shapes and dtypes only, no memory and next to no time (fake tensors
    give the same trace, slower)."""
    tokens = TRACE_MB * variant.seq
    split = variant.tp if variant.sequence_parallel and variant.tp > 1 else 1
    # a mixture's rows (tokens × top-k) and each expert's scale with the tokens too
    sizes = tuple(sorted({tokens, *token_sizes(shape, tokens // split, variant.ep)}))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = ReferenceLM(shape, layers, variant.tp, variant.attention, variant.float8,
                                variant.sequence_parallel and variant.tp > 1, variant.layout, variant.ep)
    finally:
        torch.set_default_dtype(previous)
    for p in model.parameters():  # gradients leave at once: the sharded ones are counted apart
        p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
    ids = torch.zeros(TRACE_MB, variant.seq, dtype=torch.long, device="meta")
    mode = TraceMode(detail=True, batch=TRACE_MB, token_count=sizes)
    with mode:
        loss = model(ids, ids, wrap=_checkpointing(variant.checkpointing))
        mode.mark_forward_end()
        loss.backward()
    return _compact(mode.trace, frozenset(sizes))


def _checkpointing(mode: str):
    if mode == "none":
        return None
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    from ...parallel.checkpointing import kept_ops

    keep = kept_ops() | {torch.ops.aten._scaled_mm.default}

    def contexts():
        counts = {True: 0, False: 0}  # products seen, in forward and in the recomputation

        def policy(ctx, op, *args, **kwargs):
            if op in (torch.ops.aten.mm.default, torch.ops.aten._scaled_mm.default) and \
                    mode == "selective-alternate":
                # torchtitan's "op" policy: every second product is computed again
                counts[ctx.is_recompute] += 1
                return CheckpointPolicy.MUST_SAVE if counts[ctx.is_recompute] % 2 else \
                    CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)

    def wrap(layer, *args):
        if mode == "full":
            return checkpoint(layer, *args, use_reentrant=False)
        return checkpoint(layer, *args, use_reentrant=False, context_fn=contexts)
    return wrap


def _compact(trace, tokens: frozenset) -> Costs:
    costs = Costs()
    costs.flops = {"forward": trace.forward_flops, "backward": trace.backward_flops,
                   "recompute": trace.recompute_flops}
    for op in trace.ops:
        if op.kind == "matmul":
            m, n, k, batch = op.shape
            costs.matmuls.append((op.phase, m, n, k, batch, op.dtype, m in tokens, n in tokens, k in tokens,
                                  batch % TRACE_MB == 0))
        elif op.kind == "attention":
            b, heads, sq, sk, d, causal, backward = op.shape
            costs.attention.append((op.phase, op.flops, b * heads, sq, sk, causal, backward, d))
    for key, value in _eager(trace.ops).items():
        costs.memory[(key, "eager")] = value
    for key, value in _fused(trace.ops).items():
        costs.memory[(key, "fused")] = value
    if trace.forward_end:
        costs.saved = tuple(float(x) for x in trace.timeline[trace.forward_end - 1])
    costs.peak = [tuple(float(x) for x in point) for point in trace.timeline]
    costs.largest = tuple(float(x) for x in trace.largest)
    return costs


def _eager(ops) -> dict:
    """Every memory-bound operator its own kernel, reading and writing all it touches."""
    out: dict = {}
    for op in ops:
        if op.kind != "memory":
            continue
        entry = out.setdefault(op.phase, [0.0, 0.0, 0])
        for _serial, size, token in op.reads + op.writes:
            entry[0 if token else 1] += size
        entry[2] += 1
    return out


def _fused(ops) -> dict:
    """What a fusing compiler (torch.compile's inductor, or a library's hand-fused kernels)
    still moves: between two products, the memory-bound operators run as fused kernels that
    read each tensor coming from outside the run once and write only what is used outside it
    (by a later product, by backward, as the loss); reductions end a kernel."""
    readers: dict = {}
    for index, op in enumerate(ops):
        for serial, _size, _token in op.reads:
            readers.setdefault(serial, []).append(index)
    segment_of, segment, previous_memory = {}, 0, False
    for index, op in enumerate(ops):
        is_memory = op.kind == "memory"
        if is_memory and not previous_memory:
            segment += 1
        segment_of[index] = segment if is_memory else -1
        previous_memory = is_memory
    out: dict = {}
    written_in: dict = {}
    for index, op in enumerate(ops):
        if op.kind != "memory":
            continue
        seg = segment_of[index]
        entry = out.setdefault(op.phase, [0.0, 0.0, 0])
        seen = written_in.setdefault(("read", seg), set())
        for serial, size, token in op.reads:
            if written_in.get(serial) == seg or serial in seen:
                continue
            seen.add(serial)
            entry[0 if token else 1] += size
        for serial, size, token in op.writes:
            written_in[serial] = seg
            if any(segment_of[r] != seg for r in readers.get(serial, ())):
                entry[0 if token else 1] += size
        if index == 0 or segment_of.get(index - 1) != seg or op.name in REDUCTIONS:
            entry[2] += 1
    return out
