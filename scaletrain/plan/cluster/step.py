"""A configuration's training step on the cluster, as the sum of what each part contributes:
the computation of the traced layer and of the rest of the model at the profile's kernel rates
for the run's software (`compute.py`, the loss's implementation: `loss.py`), and what each
parallelism the configuration enables adds — its cost terms, registered per parallelism in
`costs/` (tensor parallel's and context parallel's per layer, the pipeline's schedule, data
parallel's per step) — plus the optimizer, the allocator's retries where memory is tight, and
memory per GPU by parts (`memory.py`)."""

from __future__ import annotations

from dataclasses import replace

from .comm import Network
from .compute import Execution, PartTime, part_time, step_efficiency
from .config import ClusterConfig, ClusterScenario, held_layer_parameters, microbatches
from .costs import Schedule, enabled
from .costs.parts import StepParts
from .flop_conventions import published_flops_per_token
from .loss import loss_extra, loss_seconds, traced_as
from .memory import memory_parts
from .prediction import ClusterPrediction
from .reference import Layout
from .traced import Variant, trace

#: Where the step's allocations fit the GPU only without the allocator's usual reserve, the
#: caching allocator frees its cached blocks and retries (cudaFree synchronises the device;
#: PyTorch's memory statistics count them as `num_alloc_retries`): about this long each, one per
#: layer and micro-batch at worst.
ALLOC_RETRY_SECONDS = 1e-3


def variant_of(config: ClusterConfig, scenario: ClusterScenario) -> Variant:
    software, profile = config.software, scenario.profile
    layout = Layout(fused_layers=software.fused_layers, kv_expanded=software.kv_expanded(profile),
                    fused_norms=software.fused_norms, loss=traced_as(software.loss))
    return Variant(config.tp, scenario.seq // config.cp, config.checkpointing, config.float8,
                   "eager" if software.attention_kernel(profile) == "sdpa-math" else "flash", config.sequence_parallel,
                   layout, config.ep)


def stage_layers(layers: int, stages: int) -> list[int]:
    base, extra = divmod(layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def predict(config: ClusterConfig, scenario: ClusterScenario) -> ClusterPrediction:
    parts, one = _parts(config, scenario)
    costs = enabled(config)
    comm: dict = {}
    layer_s = parts.layer.total
    for c in costs:
        if c.per_layer is not None:
            for name, seconds in c.per_layer(parts).items():
                comm[name] = seconds
                layer_s += seconds
    parts = replace(parts, layer_seconds=layer_s)
    schedule = _schedule(parts, costs, layer_s)
    comm.update(schedule.comm)
    exposed_dp = 0.0
    for c in costs:
        if c.per_step is not None:
            for name, seconds in c.per_step(parts, schedule).items():
                comm[name] = seconds
                exposed_dp += seconds if name.endswith("_exposed_s") else 0.0
    comm["optimizer_s"] = optimizer_s = _optimizer_seconds(scenario.profile, parts.params_rank, config)
    step = schedule.seconds + exposed_dp + optimizer_s
    return _prediction(parts, one, schedule, step, optimizer_s, comm)


def _execution(config: ClusterConfig, scenario: ClusterScenario, fused: bool, cp: int = 1) -> Execution:
    return Execution(fused, config.software.attention_kernel(scenario.profile), cp,
                     step_efficiency(scenario.profile, scenario.gpus))


def _with_loss(rest: PartTime, config: ClusterConfig, scenario: ClusterScenario, efficiency: float) -> PartTime:
    """The rest of the model with what its loss's implementation does beyond the trace."""
    tokens = config.microbatch * scenario.seq // config.cp
    extra = loss_extra(config.software.loss, tokens, scenario.shape.vocab // config.tp)
    forward, backward = loss_seconds(extra, scenario.profile, efficiency)
    return replace(rest, forward=rest.forward + forward, backward=rest.backward + backward,
                   memory=rest.memory + forward + backward)


def _parts(config: ClusterConfig, scenario: ClusterScenario) -> tuple:
    """The step's parts every cost term reads, and the traced one-layer model (for memory)."""
    shape, profile = scenario.shape, scenario.profile
    layer_costs, rest_costs, one = trace(shape, variant_of(config, scenario))
    layer = part_time(layer_costs, profile, config.microbatch, _execution(config, scenario, config.compile, config.cp))
    # compilers compile blocks; the loss stays as its implementation runs it
    execution = _execution(config, scenario, fused=False)
    rest = _with_loss(part_time(rest_costs, profile, config.microbatch, execution), config, scenario,
                      execution.efficiency)
    layers = stage_layers(shape.layers, config.pp * config.stages_per_rank)
    chunks = tuple(sum(layers[r + config.pp * c] for c in range(config.stages_per_rank)) for r in range(config.pp))
    parts = StepParts(config, scenario, Network(profile), layer, rest, layer_costs, microbatches(config, scenario),
                      chunks, _rank_parameters(shape, config, chunks))
    return parts, one


def _schedule(parts: StepParts, costs: list, layer_s: float) -> Schedule:
    """Per rank and micro-batch: its layers; the last rank also the embedding, the head and the
    loss. The pipeline's schedule runs them where there is one; else the micro-batches follow
    each other."""
    rank_s = [n * layer_s for n in parts.chunks]
    rank_s[-1] += parts.rest.total
    compute_mb = [n * parts.layer.total for n in parts.chunks]
    compute_mb[-1] += parts.rest.total
    for c in costs:
        if c.schedule is not None:
            return c.schedule(parts, rank_s, compute_mb)
    m = parts.microbatches
    return Schedule(m * rank_s[0], 0.0, m * max(compute_mb))


def _prediction(parts: StepParts, one, schedule: Schedule, step: float, optimizer_s: float,
                comm: dict) -> ClusterPrediction:
    config, scenario, profile = parts.config, parts.scenario, parts.scenario.profile
    model_flops = _flops(parts, recompute=False)
    tokens_gpu = scenario.global_batch * scenario.seq / scenario.gpus
    memory = memory_parts(config, scenario, parts.layer_costs, one, parts.params_rank, list(parts.chunks),
                          parts.microbatches)
    for c in enabled(config):  # what a parallelism adds at the peak beyond the composition's parts
        if c.memory is not None:
            for part, nbytes in c.memory(parts).items():
                memory[part] = memory.get(part, 0.0) + nbytes
    total_memory = sum(memory.values())
    if total_memory > profile.memory_bytes >= total_memory - memory["allocator"]:
        # fits only where the allocator keeps no reserve: it frees its cache and retries
        comm["allocator_retries_s"] = retries = ALLOC_RETRY_SECONDS * max(parts.chunks) * parts.microbatches
        step += retries
    exposed = step - schedule.compute_s - schedule.bubble_s - optimizer_s
    peak = step * scenario.gpus * profile.peak("bf16")
    published = published_flops_per_token(scenario.shape, scenario.seq) * tokens_gpu * scenario.gpus
    return ClusterPrediction(
        config=config, step_seconds=step, compute_seconds=schedule.compute_s + optimizer_s,
        exposed_comm_seconds=max(0.0, exposed), bubble_seconds=max(0.0, schedule.bubble_s),
        tokens_per_second_per_gpu=tokens_gpu / step, model_flops_per_step=model_flops,
        hardware_flops_per_step=_flops(parts, recompute=True), mfu=model_flops / peak,
        mfu_published=published / peak, memory=memory, memory_bytes=total_memory,
        fits=total_memory - memory["allocator"] <= profile.memory_bytes, microbatches=parts.microbatches, comm=comm)


def _rank_parameters(shape, config: ClusterConfig, chunks: tuple) -> float:
    """Parameters of the pipeline rank holding the most, before FSDP shards them."""
    per_layer = held_layer_parameters(shape, config)
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


def _flops(parts: StepParts, recompute: bool) -> float:
    """Per optimizer step, over every GPU, as torch's counter counts them."""
    config, layer, rest = parts.config, parts.layer, parts.rest
    phases = ("forward", "backward", "recompute") if recompute else ("forward", "backward")
    per_mb = parts.scenario.shape.layers * sum(layer.flops[p] for p in phases) * config.cp
    per_mb += sum(rest.flops[p] for p in phases) * config.cp
    return per_mb * config.tp * parts.microbatches * config.dp
