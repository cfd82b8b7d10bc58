"""The cost model, as pure functions of measured numbers (seconds, bytes, bytes per second):
the one place both planners take a collective's time from (`scaletrain plan` from a probe's
measured link, `plan --hardware`'s `cluster/comm.py` from a hardware profile's).

Notation: n processes, S bytes in a message, busbw the bus bandwidth (bytes/s) and alpha
the latency of one step of a ring (seconds). A ring all-reduce sends 2(n-1) chunks of S/n
bytes one after the other, an all-gather or a reduce-scatter (n-1) of them; a tree
all-reduce (NCCL's across nodes) moves 2S and pays 2·log2(n) steps of latency.
"""

from __future__ import annotations

import math
from typing import Callable, Union

#: Share of a step's forward + backward that is the forward: backward computes about twice
#: what forward does (a gradient for the input and one for the weights of each product).
FORWARD_SHARE = 1 / 3
#: ... and the backward's share, behind which DDP hides its all-reduce.
BACKWARD_SHARE = 2 * FORWARD_SHARE

#: DistributedDataParallel's bucket sizes: the first bucket (the last layers' gradients,
#: ready first) is capped small so communication starts early; the others at 25 MiB.
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET_BYTES = 25 * 1024 * 1024


def ring_all_reduce_seconds(nbytes: float, n: int, busbw: float, alpha: float) -> float:
    """2(n-1)/n × S / busbw + 2(n-1) × alpha; nothing to do on one process."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / busbw + 2 * (n - 1) * alpha


def ring_all_gather_seconds(nbytes: float, n: int, busbw: float, alpha: float) -> float:
    """All-gather (or reduce-scatter) of a total of S bytes: (n-1)/n × S / busbw + (n-1) × alpha."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) / n * nbytes / busbw + (n - 1) * alpha


def tree_all_reduce_seconds(nbytes: float, n: int, busbw: float, alpha: float) -> float:
    """A reduction up a binary tree and the broadcast down it, pipelined: 2 × S / busbw +
    2·log2(n) × alpha."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * nbytes / busbw + 2 * math.log2(n) * alpha


def all_to_all_seconds(nbytes: float, n: int, busbw: float, alpha: float) -> float:
    """All-to-all of S bytes per process (each keeps S/n, sends S/n to each of the n-1 others):
    (n-1)/n × S / busbw + (n-1) × alpha; nothing on one process."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) / n * nbytes / busbw + (n - 1) * alpha


def expert_dispatch_bytes(tokens: float, top_k: int, width: int, element_bytes: int) -> float:
    """The rows one process's dispatch (or combine) all-to-all moves for `tokens` tokens: each
    token once per expert it chose (dropless: every choice travels), `width` elements of
    `element_bytes`; (ep-1)/ep of them leave the process (all_to_all_seconds)."""
    return tokens * top_k * width * element_bytes


#: All-to-alls of an expert-parallel layer per step: forward's dispatch and combine, and
#: backward's, which send the gradients back the same ways.
EXPERT_ALL_TO_ALLS = 4


def expert_parallel_seconds(tokens: float, top_k: int, width: int, element_bytes: int, layers: int, ep: int,
                            busbw: float, alpha: float, recomputed: float = 0.0) -> float:
    """One step's all-to-alls of `layers` mixture-of-experts layers over `ep` processes, each
    process routing `tokens` tokens: four of the dispatched rows per layer (dispatch and
    combine, forward and backward) and forward's small exchange of the counts; a layer
    computed again in backward (`recomputed`: the share of layers activation checkpointing
    recomputes) dispatches and combines once more. Both planners' expert-parallel term."""
    rows = expert_dispatch_bytes(tokens, top_k, width, element_bytes)
    per_layer = (EXPERT_ALL_TO_ALLS + 2 * recomputed) * all_to_all_seconds(rows, ep, busbw, alpha)
    counts = (1 + recomputed) * (ep - 1) * alpha
    return layers * (per_layer + counts)


def ddp_buckets(grad_tensor_bytes: list[int], first: int = DDP_FIRST_BUCKET_BYTES,
                cap: int = DDP_BUCKET_BYTES) -> list[int]:
    """Sizes of the messages DDP sends: gradients in backward order, packed into a bucket
    until it reaches its cap (a bucket holds whole tensors, so it may exceed the cap)."""
    buckets, current, limit = [], 0, first
    for size in grad_tensor_bytes:
        current += size
        if current >= limit:
            buckets.append(current)
            current, limit = 0, cap
    if current:
        buckets.append(current)
    return buckets


def ddp_comm_seconds(grad_tensor_bytes: list[float], n: int, busbw: Union[float, Callable[[float], float]],
                     alpha: float) -> float:
    """The gradients all-reduced bucket by bucket: each bucket pays the ring's latency, at the
    bandwidth `busbw` (bytes/s, or a function of a message's size giving them: small messages
    get less)."""
    rate = busbw if callable(busbw) else (lambda nbytes: busbw)
    return sum(ring_all_reduce_seconds(b, n, rate(b), alpha) for b in ddp_buckets(grad_tensor_bytes))


def fsdp_comm_seconds(param_bytes: float, grad_bytes: float, n: int, units: int, busbw: float,
                      alpha: float, gathers_per_unit: int = 2, gather_ratio: float = 1.0,
                      scatter_ratio: float = 1.0) -> float:
    """FSDP gathers each unit's parameters for forward and again for backward (they are
    freed in between; once only when they stay gathered, reshard_after_forward false), and
    reduce-scatters the gradients: 3 collectives per unit (2). Each as a ring takes it, times
    what the backend's own all_gather and reduce_scatter were measured to take beyond a ring
    (`gather_ratio`, `scatter_ratio`)."""
    units = max(1, units)
    gathers = gathers_per_unit * units * ring_all_gather_seconds(param_bytes / units, n, busbw, alpha)
    return gather_ratio * gathers + scatter_ratio * units * ring_all_gather_seconds(grad_bytes / units, n, busbw, alpha)


def exposed_seconds(comm: float, hideable: float, overlap: float) -> float:
    """Communication left on the critical path when `overlap` (0..1) of the `hideable`
    compute can run at the same time as it."""
    return max(0.0, comm - overlap * hideable)


def pipeline_bubble(stages: int, microbatches: int) -> float:
    """Fraction of a pipeline step that a stage waits: (p-1)/(m+p-1)."""
    return (stages - 1) / (microbatches + stages - 1)


def speedup(step_seconds: float, global_batch: int, baseline_step_seconds: float, baseline_batch: int) -> float:
    """Samples per second against the one-process baseline's samples per second."""
    return (global_batch / step_seconds) / (baseline_batch / baseline_step_seconds)


def memory_pipeline(stage_bytes: float, model_bytes: float, params: float, grads: float, optimizer: float,
                    activations: float, stages: int, microbatches: int) -> float:
    """A stage holds its blocks' share of parameters, gradients and optimizer state, and the
    activations of the micro-batches in flight (1F1B keeps at most `stages` of them)."""
    share = stage_bytes / model_bytes if model_bytes else 1 / stages
    in_flight = min(stages, microbatches) / microbatches
    return share * (params + grads + optimizer) + activations / stages * in_flight
