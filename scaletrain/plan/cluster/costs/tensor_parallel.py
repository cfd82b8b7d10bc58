"""Tensor parallel's cluster costs: per layer and micro-batch two collectives of the layer's
activations in forward and two in backward (again in a recomputed forward), on the critical
path; async TP hides them behind the products they are split into, as far as those last. With
sequence parallel each is an all-gather and a reduce-scatter; under float8 the all-gather moves
fp8."""

from __future__ import annotations

from ..comm import mesh_group
from .parts import StepParts
from .registry import ClusterCostTerms, register


def per_layer(parts: StepParts) -> dict:
    config, net = parts.config, parts.net
    act_bytes = parts.activation_bytes
    tp_group = mesh_group(config.dims, ("tp",), parts.gpus_per_node)
    # (sequence parallel: an all-gather before and a reduce-scatter after each, the same bytes;
    # under float8 the all-gather moves the activations already cast to fp8, one byte each)
    gathered = act_bytes / 2 if config.float8 else act_bytes
    collective = net.all_gather(gathered, tp_group) + net.reduce_scatter(act_bytes, tp_group) \
        if config.sequence_parallel else net.all_reduce(act_bytes, tp_group)
    seconds = (2 * parts.forwards + 2) * collective
    if config.async_tp:
        seconds = max(0.0, seconds - parts.layer.matmul)
    return {"tp_per_layer_s": seconds}


COSTS = register(ClusterCostTerms("tensor_parallel", enabled=lambda config: config.tp > 1, per_layer=per_layer))
