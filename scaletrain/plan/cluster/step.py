"""A configuration's training step on the cluster: compute from the traced layer and the rest
of the model at the profile's kernel rates, the collectives of each mesh dimension and how much
of them the step hides, the pipeline's bubble from its schedule, and memory per GPU by parts.

- Tensor parallel: per layer and micro-batch two collectives of the layer's activations in
  forward and two in backward (again in a recomputed forward), on the critical path; async TP
  hides them behind the products they are split into, as far as those last. With sequence
  parallel each is an all-gather and a reduce-scatter; under float8 the all-gather moves fp8.
- Context parallel: the ring passes every key-value chunk round, overlapped with the attention
  of the chunk in hand; what the attention does not cover is exposed.
- FSDP: all-gather of each block's bf16 parameters (forward, and again in backward where
  blocks are resharded after forward) and reduce-scatter of its fp32 gradients, prefetched
  while other blocks compute: exposed are the first gather, the last reduction and what the
  compute cannot cover. HSDP adds an all-reduce across replicas; DDP an all-reduce of the
  gradients, hidden behind backward where `overlap_grad_reduce`.
- Pipeline: 1F1B played out micro-batch by micro-batch (plan/schedule_sim.py) with the
  stages' own times and their transfers; interleaved with v chunks per rank: the bubble is
  (p − 1)/v micro-batch times.
"""

from __future__ import annotations

from ..schedule_sim import one_f_one_b_seconds
from .comm import Network, group
from .compute import part_time, step_efficiency
from .config import ClusterConfig, Prediction, Scenario, microbatches
from .memory import memory_parts
from .traced import Variant, trace

#: Sends of a pipeline played out step by step beyond this many are costed in closed form.
SIMULATED_OPERATIONS = 20000


def variant_of(config: ClusterConfig, scenario: Scenario) -> Variant:
    return Variant(config.tp, scenario.seq // config.cp, config.checkpointing, config.float8, config.attention,
                   config.sequence_parallel)


def stage_layers(layers: int, stages: int) -> list[int]:
    base, extra = divmod(layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def predict(config: ClusterConfig, scenario: Scenario) -> Prediction:
    shape, profile = scenario.shape, scenario.profile
    layer_costs, rest_costs, one = trace(shape, variant_of(config, scenario))
    mb, m = config.microbatch, microbatches(config, scenario)
    efficiency = step_efficiency(profile, scenario.gpus)
    layer = part_time(layer_costs, profile, mb, config.compile, config.cp, efficiency)
    rest = part_time(rest_costs, profile, mb, fused=False, efficiency=efficiency)  # compilers compile blocks; the loss stays eager
    net = Network(profile)
    gpn = scenario.gpus_per_node
    tokens_mb = mb * scenario.seq // config.cp  # on this GPU

    # Tensor parallel: 2 collectives of the activations per layer forward, 2 backward.
    act_bytes = tokens_mb * shape.hidden * 2
    tp_group = group(config.tp, 1, gpn)
    forwards = 2 if config.checkpointing == "full" else 1  # a recomputed forward talks again
    # (sequence parallel: an all-gather before and a reduce-scatter after each, the same bytes;
    # under float8 the all-gather moves the activations already cast to fp8, one byte each)
    gathered = act_bytes / 2 if config.float8 else act_bytes
    collective = net.all_gather(gathered, tp_group) + net.reduce_scatter(act_bytes, tp_group) \
        if config.sequence_parallel else net.all_reduce(act_bytes, tp_group)
    tp_per_layer = (2 * forwards + 2) * collective if config.tp > 1 else 0.0
    if config.async_tp:
        tp_per_layer = max(0.0, tp_per_layer - layer.matmul)
    # Context parallel: K and V chunks passed round the ring; backward passes them and their gradients.
    cp_per_layer = 0.0
    if config.cp > 1:
        kv = 2 * tokens_mb * max(1, shape.kv_heads // config.tp) * shape.head_dim * 2
        cp_group = group(config.cp, config.tp, gpn)
        ring = (config.cp - 1) * net.send(kv, cp_group.nodes > 1)
        cp_per_layer = max(0.0, ring * (1 + forwards) - layer.attention) + max(0.0, 2 * ring - layer.attention)

    layer_s = layer.total + tp_per_layer + cp_per_layer
    layers = stage_layers(shape.layers, config.pp * config.stages_per_rank)
    chunks = [sum(layers[r + config.pp * c] for c in range(config.stages_per_rank)) for r in range(config.pp)]
    fwd_share = (layer.forward + layer.recompute) / max(layer.total, 1e-12)

    # Per rank and micro-batch: its layers; the first rank also the embedding, the last the head and loss.
    rank_s = [n * layer_s for n in chunks]
    rank_s[-1] += rest.total
    compute_mb = [n * layer.total for n in chunks]
    compute_mb[-1] += rest.total

    # The pipeline: its transfers and bubble.
    bubble = 0.0
    # Stages are the mesh's outermost dimension: neighbours are gpus/pp ranks apart, on other
    # nodes once that is a node or more. With sequence parallel each rank sends its share.
    sent = act_bytes / (config.tp if config.sequence_parallel else 1)
    send_s = net.send(sent, across_nodes=scenario.gpus // config.pp >= gpn) if config.pp > 1 else 0.0
    if config.pp == 1:
        pipeline_s = m * rank_s[0]
    elif config.schedule == "1f1b" and m < 4 * config.pp and m * config.pp <= SIMULATED_OPERATIONS:
        # few micro-batches: the stages' differences and transfers decide; played out
        forward = [t * fwd_share for t in rank_s]
        backward = [t - f for t, f in zip(rank_s, forward)]
        pipeline_s = one_f_one_b_seconds(forward, backward, m, [net.net_latency] * config.pp, send_s)
        bubble = pipeline_s - m * max(rank_s)
    else:
        v = config.stages_per_rank if config.schedule == "interleaved" else 1
        slowest = max(rank_s)
        bubble = (config.pp - 1) / v * slowest + 2 * (config.pp - 1) * v * send_s
        pipeline_s = m * slowest + bubble
    compute_s = m * max(compute_mb)

    # Data parallel: FSDP's gathers and reductions, HSDP's and DDP's all-reduce.
    params_rank = _rank_parameters(shape, config, chunks)
    dp_comm, exposed_dp = 0.0, 0.0
    if config.shards > 1:  # FSDP over dp_shard × cp, tensor parallel innermost
        shard_group = group(config.shards, config.tp, gpn)
        gathers = (1 if config.pp > 1 else (2 if m == 1 else 2 * m))
        gather = net.all_gather(params_rank * 2, shard_group)
        reduce = net.reduce_scatter(params_rank * 4, shard_group)
        dp_comm = gathers * gather + (1 if config.pp > 1 else m) * reduce
        per_block = (gather + reduce) / max(1, max(chunks))
        exposed_dp = max(0.0, dp_comm - compute_s) + per_block
    if config.dp_replicate > 1:
        replicate_group = group(config.dp_replicate, config.tp * config.cp * config.dp_shard, gpn)
        reduce = net.all_reduce(params_rank * (4 if config.fsdp else 2) / config.shards, replicate_group)
        dp_comm += reduce
        if config.overlap_grad_reduce:
            exposed_dp += max(0.0, reduce - compute_s * (1 - fwd_share)) + reduce / max(1, max(chunks))
        else:
            exposed_dp += reduce

    optimizer_s = _optimizer_seconds(profile, params_rank, config)
    step = pipeline_s + exposed_dp + optimizer_s
    model_flops = _flops(layer, rest, shape, config, m, recompute=False)
    hardware_flops = _flops(layer, rest, shape, config, m, recompute=True)
    tokens_gpu = scenario.global_batch * scenario.seq / scenario.gpus
    memory = memory_parts(config, scenario, layer_costs, one, params_rank, chunks, m)
    total_memory = sum(memory.values())
    exposed = step - compute_s - bubble - optimizer_s
    return Prediction(
        config=config, step_seconds=step, compute_seconds=compute_s + optimizer_s, exposed_comm_seconds=max(0.0, exposed),
        bubble_seconds=max(0.0, bubble), tokens_per_second_per_gpu=tokens_gpu / step,
        model_flops_per_step=model_flops, hardware_flops_per_step=hardware_flops,
        mfu=model_flops / (step * scenario.gpus * profile.peak("bf16")),
        memory=memory, memory_bytes=total_memory, fits=total_memory <= profile.memory_bytes, microbatches=m,
        comm={"tp_per_layer_s": tp_per_layer, "cp_per_layer_s": cp_per_layer, "data_parallel_s": dp_comm,
              "data_parallel_exposed_s": exposed_dp, "pipeline_send_s": send_s, "optimizer_s": optimizer_s})


def _rank_parameters(shape, config: ClusterConfig, chunks: list) -> float:
    """Parameters of the pipeline rank holding the most, before FSDP shards them (÷ tp)."""
    per_layer = shape.layer_parameters / config.tp
    first = shape.embedding_parameters / config.tp
    last = shape.head_parameters / config.tp
    if config.pp == 1:
        return chunks[0] * per_layer + first + last
    return max(chunks[0] * per_layer + first, chunks[-1] * per_layer + last, max(chunks) * per_layer)


def _optimizer_seconds(profile, params_rank: float, config: ClusterConfig) -> float:
    """Fused AdamW over this GPU's fp32 shard: parameters, gradients and both moments read,
    three written (28 bytes a parameter); FSDP's casts of gathered blocks and of gradients
    for their reduction (a read and a write each, per gather)."""
    shard = params_rank / config.shards
    moved = 28 * shard
    if config.fsdp:
        moved += params_rank * (2 + 2) * 2 + params_rank * (2 + 4)
    return profile.memory_seconds(moved, kernels=8)


def _flops(layer, rest, shape, config: ClusterConfig, m: int, recompute: bool) -> float:
    """Per optimizer step, over every GPU."""
    phases = ("forward", "backward", "recompute") if recompute else ("forward", "backward")
    per_mb = shape.layers * sum(layer.flops[p] for p in phases) * config.cp
    per_mb += sum(rest.flops[p] for p in phases) * config.cp
    return per_mb * config.tp * m * config.dp
