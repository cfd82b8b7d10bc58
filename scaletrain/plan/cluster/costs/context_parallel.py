"""Context parallel's cluster costs: the ring passes every key-value chunk round each layer
(and their gradients back in backward), overlapped with the attention of the chunk in hand;
what the attention does not cover is exposed."""

from __future__ import annotations

from ..comm import mesh_group
from .parts import StepParts
from .registry import ClusterCostTerms, register


def per_layer(parts: StepParts) -> dict:
    config, shape = parts.config, parts.scenario.shape
    kv = 2 * parts.tokens_mb * max(1, shape.kv_heads // config.tp) * shape.head_dim * 2
    cp_group = mesh_group(config.dims, ("cp",), parts.gpus_per_node)
    ring = (config.cp - 1) * parts.net.send(kv, cp_group.nodes > 1)
    attention = parts.layer.attention
    seconds = max(0.0, ring * (1 + parts.forwards) - attention) + max(0.0, 2 * ring - attention)
    return {"cp_per_layer_s": seconds}


COSTS = register(ClusterCostTerms("context_parallel", enabled=lambda config: config.cp > 1, per_layer=per_layer))
