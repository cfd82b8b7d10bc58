"""Context parallel's cluster costs, per layer and micro-batch (its attention, the whole
sequence's work shared evenly, is the computation's: `compute.py`):

- the keys and values: passed round a ring (scaletrain's ring attention; torch's with
  rotate method "alltoall"), each hop overlapped with the attention of the chunk in hand, so
  what the attention does not cover is exposed; or all-gathered before the attention and
  their gradients reduce-scattered after it (torch's "allgather", torchtitan's default),
  exposed;
- merging the partial results: each of the cp − 1 blocks the ring brings is merged into the
  running output by its log-sum-exp, in fp32 (torch's default, and scaletrain's): per block
  the running output read and written (4 + 4 bytes an element) and the block's output read (2)
  in forward; in backward the queries' gradient accumulated the same way and the keys' and
  values' gradients (fp32, 4 + 4 + 2 bytes an element each), a few kernels each.
"""

from __future__ import annotations

from ..comm import mesh_group
from .parts import StepParts
from .registry import ClusterCostTerms, register

MERGE_BYTES_PER_ELEMENT = 4 + 4 + 2
MERGE_KERNELS = 4


def per_layer(parts: StepParts) -> dict:
    config, shape, net = parts.config, parts.scenario.shape, parts.net
    kv_width = max(1, shape.kv_heads // config.tp) * shape.head_dim
    q_width = max(1, shape.heads // config.tp) * shape.head_dim
    kv = 2 * parts.tokens_mb * kv_width * 2  # this GPU's keys and values, bf16
    cp_group = mesh_group(config.dims, ("cp",), parts.gpus_per_node)
    attention = parts.layer.attention
    if config.cp_rotate == "allgather":
        gather = net.all_gather(kv * config.cp, cp_group)
        exposed = (parts.forwards + 1) * gather + net.reduce_scatter(kv * config.cp, cp_group)
    else:
        ring = (config.cp - 1) * net.send(kv, cp_group.nodes > 1)
        exposed = max(0.0, ring * (1 + parts.forwards) - attention) + max(0.0, 2 * ring - attention)
    steps = config.cp - 1
    forward_bytes = steps * MERGE_BYTES_PER_ELEMENT * parts.tokens_mb * q_width
    backward_bytes = steps * MERGE_BYTES_PER_ELEMENT * parts.tokens_mb * (q_width + 2 * kv_width)
    profile = parts.scenario.profile
    merge = parts.forwards * profile.memory_seconds(forward_bytes, steps * MERGE_KERNELS) + \
        profile.memory_seconds(backward_bytes, steps * 2 * MERGE_KERNELS)
    return {"cp_per_layer_s": exposed, "cp_merge_per_layer_s": merge}


COSTS = register(ClusterCostTerms("context_parallel", enabled=lambda config: config.cp > 1, per_layer=per_layer))
