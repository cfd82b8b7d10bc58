"""Context parallel's cluster costs, per layer and micro-batch (its attention, the whole
sequence's work shared evenly, is the computation's: `compute.py`):

- the keys and values: passed round a ring (scaletrain's ring attention; torch's with
  rotate method "alltoall"), each hop overlapped with the attention of the chunk in hand, so
  what the attention does not cover is exposed; or all-gathered before the attention, in
  every forward and again in backward (torch's "allgather", its default and torchtitan's),
  exposed, the keys' and values' fp32 gradients then passed round the ring in backward
  behind the attention's backward;
- merging the partial results: each of the cp − 1 blocks the ring brings is merged into the
  running output by its log-sum-exp in fp32, as torch's `_SDPAMerger` (convert_to_f32, its
  default) and scaletrain's `ring_attention._merge` do it: the block's output cast to fp32 and
  the running output updated by a few elementwise operators, about MERGE_BYTES an element of
  the queries' output and MERGE_KERNELS kernels per block; in backward the queries' gradient
  and the keys' and values' are accumulated in fp32 (a bf16 block read, an fp32 accumulator
  read and written: 10 bytes an element each).
"""

from __future__ import annotations

from ..comm import mesh_group
from .parts import StepParts
from .registry import ClusterCostTerms, register

#: The block's output cast to fp32 (2 read + 4 written), out − block (4 + 4 + 4), × the
#: sigmoid of the log-sum-exps' difference (4 + 4), subtracted from out (4 + 4 + 4), and half the
#: blocks (the queries' second chunk) copied back into the running output (8 over half): ~38 and
#: ~23 bytes, 32 on average over the load-balanced blocks.
MERGE_BYTES = 32
MERGE_KERNELS = 6
ACCUMULATE_BYTES = 2 + 4 + 4


def per_layer(parts: StepParts) -> dict:
    config, shape, net = parts.config, parts.scenario.shape, parts.net
    kv_width = max(1, shape.kv_heads // config.tp) * shape.head_dim
    q_width = max(1, shape.heads // config.tp) * shape.head_dim
    kv = 2 * parts.tokens_mb * kv_width * 2  # this GPU's keys and values, bf16
    cp_group = mesh_group(config.dims, ("cp",), parts.gpus_per_node)
    attention = parts.layer.attention
    ring = (config.cp - 1) * net.send(kv, cp_group.nodes > 1)
    gradients_ring = 2 * ring  # fp32 gradients of the keys and values, round the ring in backward
    backward_attention = attention * (1 - parts.forward_share)
    if config.cp_rotate == "allgather":
        exposed = (parts.forwards + 1) * net.all_gather(kv * config.cp, cp_group) + \
            max(0.0, gradients_ring - backward_attention)
    else:
        exposed = max(0.0, ring * parts.forwards - (attention - backward_attention)) + \
            max(0.0, ring + gradients_ring - backward_attention)
    steps = config.cp - 1
    forward_bytes = steps * MERGE_BYTES * parts.tokens_mb * q_width
    backward_bytes = steps * ACCUMULATE_BYTES * parts.tokens_mb * (q_width + 2 * kv_width)
    profile = parts.scenario.profile
    merge = parts.forwards * profile.memory_seconds(forward_bytes, steps * MERGE_KERNELS) + \
        profile.memory_seconds(backward_bytes, steps * 3)
    return {"cp_per_layer_s": exposed, "cp_merge_per_layer_s": merge}


COSTS = register(ClusterCostTerms("context_parallel", enabled=lambda config: config.cp > 1, per_layer=per_layer))
