"""Data parallel's cluster costs: FSDP's gathers of each block's bf16 parameters (forward, and
again in backward where blocks are resharded after forward) and reduce-scatters of its
gradients, prefetched while other blocks compute: exposed are the first gather, the last
reduction and what the compute cannot cover. HSDP adds an all-reduce across replicas; DDP an
all-reduce of the gradients, hidden behind backward where `overlap_grad_reduce`."""

from __future__ import annotations

from ..comm import mesh_group
from .parts import StepParts
from .registry import ClusterCostTerms, Schedule, register


def per_step(parts: StepParts, schedule: Schedule) -> dict:
    config, net, m = parts.config, parts.net, parts.microbatches
    params_rank, compute_s = parts.params_rank, schedule.compute_s
    comm, exposed = 0.0, 0.0
    if config.shards > 1:  # FSDP over dp_shard × cp, tensor parallel innermost
        shard_group = mesh_group(config.dims, ("dp_shard", "cp"), parts.gpus_per_node)
        gathers = (1 if config.pp > 1 else (2 if m == 1 else 2 * m))
        gather = net.all_gather(params_rank * 2, shard_group)
        reduce = net.reduce_scatter(params_rank * 4, shard_group)
        comm = gathers * gather + (1 if config.pp > 1 else m) * reduce
        per_block = (gather + reduce) / max(1, max(parts.chunks))
        exposed = max(0.0, comm - compute_s) + per_block
    if config.dp_replicate > 1:
        replicate_group = mesh_group(config.dims, ("dp_replicate",), parts.gpus_per_node)
        reduce = net.all_reduce(params_rank * (4 if config.fsdp else 2) / config.shards, replicate_group)
        comm += reduce
        if config.overlap_grad_reduce:
            exposed += max(0.0, reduce - compute_s * (1 - parts.forward_share)) + reduce / max(1, max(parts.chunks))
        else:
            exposed += reduce
    return {"data_parallel_s": comm, "data_parallel_exposed_s": exposed}


COSTS = register(ClusterCostTerms("data_parallel", enabled=lambda config: config.shards > 1 or config.dp_replicate > 1,
                                  per_step=per_step))
