"""Data parallel's cluster costs.

FSDP (over dp_shard × cp, tensor parallel innermost), block by block: each layer is a block,
the embedding and the head the root; a mixture's experts under expert parallel are gathered
and reduced apart, 1/ep of them over the dp_shard × cp ÷ ep GPUs that hold the same ones. In forward a block's bf16 parameters are all-gathered
while the block before it computes (prefetch): exposed is the root's gather and the first
layer's, then whatever of each gather outlasts the forward of the layer it hides behind. In
backward each block is gathered again (resharded after forward; the last layer stays
gathered) and its gradients reduce-scattered (in the reduction dtype: fp32 under scaletrain's
and torchtitan's FSDP2, the parameters' under FSDP1's default mixed precision) — the gather
and the reduction share the same links, so their sum hides behind one layer's backward, and
the last reduction and the root's are exposed. Every micro-batch of gradient accumulation
does it again (FSDP2's default). Small micro-batches give short layers, and the per-layer
collectives, whose size does not shrink with them, stop hiding: that is where FSDP's
communication shows. Collectives run at the profile's achieved bus bandwidth (nccl-tests') with
a latency per ring step (`comm.py`). A pipeline stage under FSDP keeps its blocks gathered for
the step and reduces once, after the last micro-batch (torchtitan's and torch's pipeline
schedules).

HSDP adds an all-reduce of the gradient shards across replicas, DDP an all-reduce of the
gradients, hidden behind backward where `overlap_grad_reduce`.
"""

from __future__ import annotations

from ..comm import group, mesh_group
from ..config import held_layer_parameters, layer_parameters
from .parts import StepParts
from .registry import ClusterCostTerms, Schedule, register

REDUCE_BYTES = {"fp32": 4, "bf16": 2}


def layer_collective(parts: StepParts, collective, element_bytes: int) -> float:
    """One layer's gather (or reduction) of `element_bytes` a parameter: the dense weights over
    dp_shard × cp and, under expert parallel, the GPU's experts (1/ep of them) over the
    dp_shard × cp ÷ ep GPUs holding the same ones, each a collective of its own (the experts
    are FSDP groups of their own in training); without it the layer is one collective."""
    config = parts.config
    shards = mesh_group(config.dims, ("dp_shard", "cp"), parts.gpus_per_node)
    dense, experts = layer_parameters(parts.scenario.shape, config)
    if config.ep == 1:
        return collective(element_bytes * (dense + experts), shards)
    # the GPUs holding the same experts are ep × tp ranks apart
    same_experts = group(config.shards // config.ep, config.dims.span("ep"), parts.gpus_per_node)
    return collective(element_bytes * dense, shards) + collective(element_bytes * experts, same_experts)


def fsdp_seconds(parts: StepParts) -> tuple:
    """(sent, exposed) seconds of FSDP's gathers and reductions in a step."""
    config, net, m, shape = parts.config, parts.net, parts.microbatches, parts.scenario.shape
    shards = mesh_group(config.dims, ("dp_shard", "cp"), parts.gpus_per_node)
    reduce_bytes = REDUCE_BYTES[config.software.reduce_dtype]
    root_params = max(0.0, parts.params_rank - max(parts.chunks) * held_layer_parameters(shape, config))
    gather = layer_collective(parts, net.all_gather, 2)
    reduce = layer_collective(parts, net.reduce_scatter, reduce_bytes)
    root_gather = net.all_gather(2 * root_params, shards)
    root_reduce = net.reduce_scatter(reduce_bytes * root_params, shards)
    layers = max(parts.chunks)
    forward = parts.layer_seconds * parts.forward_share
    backward = parts.layer_seconds - forward
    hidden_forward = (layers - 1) * max(0.0, gather - forward)
    if config.pp > 1:  # gathered once for the step, reduced once after the last micro-batch
        sent = layers * (gather + reduce) + root_gather + root_reduce
        exposed = root_gather + gather + hidden_forward + (layers - 1) * max(0.0, reduce - backward) + reduce \
            + root_reduce
        return sent, exposed
    sent_mb = (2 * layers - 1) * gather + layers * reduce + root_gather + root_reduce
    exposed_mb = root_gather + gather + hidden_forward + (layers - 1) * max(0.0, gather + reduce - backward) \
        + reduce + root_reduce
    return m * sent_mb, m * exposed_mb


def replicate_seconds(parts: StepParts, schedule: Schedule) -> tuple:
    """(sent, exposed) seconds of the all-reduce across replicas (HSDP's of the gradient
    shards, DDP's of the gradients)."""
    config, net = parts.config, parts.net
    replicas = mesh_group(config.dims, ("dp_replicate",), parts.gpus_per_node)
    reduce_bytes = REDUCE_BYTES[config.software.reduce_dtype] if config.fsdp else 2
    reduce = net.all_reduce(parts.params_rank * reduce_bytes / config.shards, replicas)
    if not config.overlap_grad_reduce:
        return reduce, reduce
    hideable = schedule.compute_s * (1 - parts.forward_share)
    return reduce, max(0.0, reduce - hideable) + reduce / max(1, max(parts.chunks))


def per_step(parts: StepParts, schedule: Schedule) -> dict:
    sent, exposed = 0.0, 0.0
    if parts.config.shards > 1:
        sent, exposed = fsdp_seconds(parts)
    if parts.config.dp_replicate > 1:
        more, shown = replicate_seconds(parts, schedule)
        sent, exposed = sent + more, exposed + shown
    return {"data_parallel_s": sent, "data_parallel_exposed_s": exposed}


COSTS = register(ClusterCostTerms("data_parallel", enabled=lambda config: config.shards > 1 or config.dp_replicate > 1,
                                  per_step=per_step))
