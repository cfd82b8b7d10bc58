"""What a cluster plan is asked (`ClusterScenario`) and what it predicts for (`ClusterConfig`):
the degrees of the mesh as training describes them (`parallel/dims.py`'s `ParallelDims`, its
`MESH` walked outermost first: pipeline, replicas, shards, context, experts, tensor), the
micro-batch, activation checkpointing, and the software the run uses (`software.Software`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...foundation.errors import UsageError, arg
from ...parallel.dims import CP, DP_REPLICATE, DP_SHARD, EP, PP, TP, ParallelDims
from ...workloads.model_shapes import ModelShape
from .software import Software

CHECKPOINTING = ("none", "selective", "full")

#: How a plan's table names each mesh dimension, in the order it lists them.
LABELS = ((DP_SHARD, "fsdp"), (DP_REPLICATE, "replicate"), (TP, "tp"), (PP, "pp"), (CP, "cp"))


@dataclass(frozen=True)
class ClusterScenario:
    shape: ModelShape
    profile: object  # hardware.HardwareProfile
    gpus: int
    gpus_per_node: int
    seq: int
    global_batch: int  # sequences per optimizer step
    model_config: str = ""  # what --model-config named (a built-in name or a file), for the train flags


@dataclass(frozen=True)
class ClusterConfig:
    dims: ParallelDims = ParallelDims()
    microbatch: int = 1  # sequences per forward on one GPU
    checkpointing: str = "none"  # none, selective, full; selective-alternate: torchtitan's "op" policy
    float8: bool = False
    schedule: str = "1f1b"  # 1f1b or interleaved (pp > 1)
    stages_per_rank: int = 1  # interleaved: model chunks per pipeline rank
    async_tp: bool = False  # tensor parallel's collectives overlapped with its products
    overlap_grad_reduce: bool = True  # data parallel's reduction hidden behind backward where it can be
    sequence_parallel: bool = True  # tensor parallel splits norms and the residual stream along the sequence
    fsdp_casts: bool = False  # FSDP2 wraps even an unsharded model (one process): its gathers and casts
    optimizer_sharded: bool = False  # without FSDP: the optimizer's state divided over data parallel (ZeRO-1)
    cp_rotate: str = "ring"  # context parallel passes keys and values round a ring, or all-gathers them ("allgather")
    expert_load: float = 1.0  # the busiest expert-parallel GPU's rows over the mean (1.0: balanced routing)
    software: Software = field(default_factory=Software)

    # the mesh's degrees, read from `dims`
    dp_replicate = property(lambda self: self.dims[DP_REPLICATE])
    dp_shard = property(lambda self: self.dims[DP_SHARD])
    tp = property(lambda self: self.dims[TP])
    pp = property(lambda self: self.dims[PP])
    cp = property(lambda self: self.dims[CP])
    ep = property(lambda self: self.dims[EP])  # borrowed from dp_shard × cp: not a factor of the world

    @property
    def compile(self) -> bool:
        return self.software.compile

    @property
    def fsdp(self) -> bool:
        return self.dp_shard > 1 or self.cp > 1 or self.fsdp_casts

    @property
    def shards(self) -> int:
        """The ranks FSDP shards states over: the mesh dimensions that shard state (dp_shard ×
        cp: context-parallel ranks hold the same parameters; torch's and torchtitan's meshes
        shard over both, flattened)."""
        return self.dims.shards if self.fsdp else 1

    @property
    def world(self) -> int:
        return self.dims.world_size

    @property
    def dp(self) -> int:
        return self.dims.dp_size

    @property
    def strategy(self) -> str:
        if self.pp > 1:
            return "pipeline"
        if self.dp_shard > 1:
            return "fsdp"
        if self.tp > 1 and self.dp_replicate == 1:
            return "tp"
        return "ddp"

    def label(self) -> str:
        parts = [f"{label} {self.dims[name]}" for name, label in LABELS if self.dims[name] > 1]
        text = " × ".join(parts) or "1 GPU"
        if self.ep > 1:
            text += f" with ep {self.ep}"
        if self.pp > 1:
            text += f" ({self.schedule}" + (f", {self.stages_per_rank} stages/rank" if self.stages_per_rank > 1 else "") \
                + ")"
        text += f", mb {self.microbatch}, AC {self.checkpointing}"
        return text + (", float8" if self.float8 else "") + (", compiled" if self.compile else "")


def layer_parameters(shape: ModelShape, config: ClusterConfig) -> tuple[float, float]:
    """(dense, experts): one layer's parameters on a GPU before FSDP shards them — the dense
    weights ÷ tp (the experts stay whole in every tensor-parallel process), the experts ÷ ep."""
    experts = shape.expert_parameters
    return (shape.layer_parameters - experts) / config.tp, experts / config.ep


def held_layer_parameters(shape: ModelShape, config: ClusterConfig) -> float:
    """One layer's parameters a GPU holds before FSDP and expert parallel split them: the dense
    weights ÷ tp, a mixture's experts whole (expert parallel's split of them and FSDP's
    together are FSDP's dp_shard × cp ways)."""
    dense, experts = layer_parameters(shape, config)
    return dense + experts * config.ep


def microbatches(config: ClusterConfig, scenario: ClusterScenario) -> int:
    """Micro-batches each data-parallel rank runs per optimizer step (a pipeline's, or the
    gradient accumulation's)."""
    return scenario.global_batch // (config.dp * config.microbatch)


def check(config: ClusterConfig, scenario: ClusterScenario) -> None:
    """The configuration's degrees against the GPUs, the model and the batch, each mistake in
    one line naming the flag."""
    s = scenario.shape
    if config.world != scenario.gpus:
        named = " × ".join(f"{name} {config.dims[name]}" for name, _label in LABELS)
        raise UsageError(f"degrees {named} = {config.world}, but {arg('gpus', scenario.gpus)}: make them multiply to "
                         f"the GPUs (e.g. {arg('dp_shard', max(1, scenario.gpus // max(1, config.world // config.dp_shard)))})")
    if s.heads % config.tp or (s.kv_heads % config.tp and config.tp % s.kv_heads):
        raise UsageError(f"{arg('tp', config.tp)} does not divide {s.name}'s {s.heads} attention heads "
                         f"({s.kv_heads} key-value heads); choose a tensor-parallel degree that does")
    if s.ffn % config.tp or s.vocab % config.tp:
        raise UsageError(f"{arg('tp', config.tp)} does not divide {s.name}'s feed-forward width {s.ffn} or "
                         f"vocabulary {s.vocab}")
    if config.tp > scenario.gpus_per_node:
        raise UsageError(f"{arg('tp', config.tp)} is more than the {scenario.gpus_per_node} GPUs of a node: tensor "
                         f"parallel talks in every layer and belongs inside a node ({arg('gpus_per_node')})")
    if s.layers < config.pp * config.stages_per_rank:
        raise UsageError(f"{arg('pp', config.pp)} × {config.stages_per_rank} stage(s) per rank is more stages than "
                         f"{s.name}'s {s.layers} layers")
    if config.tp > 1 and config.sequence_parallel and (scenario.seq // config.cp) % config.tp:
        raise UsageError(f"{arg('seq_len', scenario.seq)} does not split into {arg('tp', config.tp)} parts per "
                         "sequence (sequence parallel splits each sequence's norms and residual stream over tensor "
                         "parallel): give a multiple of it")
    if scenario.seq % (2 * config.cp if config.cp > 1 else 1):
        raise UsageError(f"{arg('seq_len', scenario.seq)} does not split into 2 × {arg('cp', config.cp)} chunks "
                         "(context parallel balances a causal sequence in 2·cp chunks)")
    if scenario.global_batch % config.dp or (scenario.global_batch // config.dp) % config.microbatch:
        raise UsageError(f"{arg('global_batch', scenario.global_batch)} sequences cannot be made of "
                         f"{arg('micro_batch', config.microbatch)} × data-parallel degree {config.dp} × whole "
                         f"micro-batches: give a global batch that is a multiple of {config.dp * config.microbatch}")
    if config.pp > 1 and microbatches(config, scenario) < config.pp:
        raise UsageError(f"{microbatches(config, scenario)} micro-batch(es) per step cannot fill {arg('pp', config.pp)} "
                         f"pipeline stages: raise {arg('global_batch')} or lower {arg('micro_batch')}")
    check_experts(config, s)
    if config.float8 and not scenario.profile.peak("fp8"):
        raise UsageError(f"{arg('float8')}: {scenario.profile.name} has no float8 tensor cores")


def check_experts(config: ClusterConfig, shape: ModelShape) -> None:
    """Expert parallel's degree against the model and the processes it borrows, in one line."""
    ep = config.ep
    if ep == 1:
        return
    if not shape.experts:
        raise UsageError(f"{arg('ep', ep)} splits a mixture of experts' experts across GPUs, but {shape.name} is a dense "
                         f"model (no experts): drop {arg('ep')}")
    if shape.experts % ep:
        fits = [d for d in range(2, shape.experts + 1) if shape.experts % d == 0]
        raise UsageError(f"{arg('ep', ep)}: {shape.name}'s {shape.experts} experts do not split into {ep} equal groups; "
                         f"use {' or '.join(arg('ep', d) for d in fits)} (a divisor of {shape.experts})")
    if config.shards % ep:
        raise UsageError(f"{arg('ep', ep)} regroups the dp_shard × cp = {config.shards} GPUs that shard the state (it adds "
                         f"none of its own), so it must divide {config.shards}; give {arg('dp_shard')} a multiple of {ep}")
