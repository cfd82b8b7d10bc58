"""What a cluster plan is asked (the scenario) and what it predicts for (a configuration)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...foundation.errors import UsageError, arg
from ...workloads.model_shapes import ModelShape

CHECKPOINTING = ("none", "selective", "full")


@dataclass(frozen=True)
class Scenario:
    shape: ModelShape
    profile: object  # hardware.HardwareProfile
    gpus: int
    gpus_per_node: int
    seq: int
    global_batch: int  # sequences per optimizer step
    model_config: str = ""  # what --model-config named (a built-in name or a file), for the train flags


@dataclass(frozen=True)
class ClusterConfig:
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    microbatch: int = 1  # sequences per forward on one GPU
    checkpointing: str = "none"  # none, selective, full; selective-alternate: torchtitan's "op" policy
    float8: bool = False
    compile: bool = False  # memory-bound operators fused (torch.compile, or a library's fused kernels)
    schedule: str = "1f1b"  # 1f1b or interleaved (pp > 1)
    stages_per_rank: int = 1  # interleaved: model chunks per pipeline rank
    async_tp: bool = False  # tensor parallel's collectives overlapped with its products
    overlap_grad_reduce: bool = True  # data parallel's reduction hidden behind backward where it can be
    attention: str = "flash"  # flash, or eager (two products and a softmax)
    sequence_parallel: bool = True  # tensor parallel splits norms and the residual stream along the sequence
    fsdp_casts: bool = False  # FSDP2 wraps even an unsharded model (one process): its gathers and casts

    @property
    def fsdp(self) -> bool:
        return self.dp_shard > 1 or self.cp > 1 or self.fsdp_casts

    @property
    def shards(self) -> int:
        """The ranks FSDP shards states over: dp_shard × cp (context-parallel ranks hold the same
        parameters; torch's and torchtitan's meshes shard over both, flattened)."""
        return self.dp_shard * self.cp if self.fsdp else 1

    @property
    def world(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

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
        parts = []
        for name, value in (("fsdp", self.dp_shard), ("replicate", self.dp_replicate), ("tp", self.tp),
                            ("pp", self.pp), ("cp", self.cp)):
            if value > 1:
                parts.append(f"{name} {value}")
        text = " × ".join(parts) or "1 GPU"
        if self.pp > 1:
            text += f" ({self.schedule}" + (f", {self.stages_per_rank} stages/rank" if self.stages_per_rank > 1 else "") \
                + ")"
        text += f", mb {self.microbatch}, AC {self.checkpointing}"
        return text + (", float8" if self.float8 else "") + (", compiled" if self.compile else "")


def microbatches(config: ClusterConfig, scenario: Scenario) -> int:
    """Micro-batches each data-parallel rank runs per optimizer step (a pipeline's, or the
    gradient accumulation's)."""
    return scenario.global_batch // (config.dp * config.microbatch)


def check(config: ClusterConfig, scenario: Scenario) -> None:
    """The configuration's degrees against the GPUs, the model and the batch, each mistake in
    one line naming the flag."""
    s = scenario.shape
    if config.world != scenario.gpus:
        raise UsageError(f"degrees dp_replicate {config.dp_replicate} × dp_shard {config.dp_shard} × tp {config.tp} × "
                         f"pp {config.pp} × cp {config.cp} = {config.world}, but {arg('gpus', scenario.gpus)}: "
                         f"make them multiply to the GPUs (e.g. {arg('dp_shard', max(1, scenario.gpus // max(1, config.world // config.dp_shard)))})")
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
    if config.float8 and not scenario.profile.peak("fp8"):
        raise UsageError(f"{arg('float8')}: {scenario.profile.name} has no float8 tensor cores")


@dataclass
class Prediction:
    config: ClusterConfig
    step_seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    bubble_seconds: float
    tokens_per_second_per_gpu: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    mfu: float
    memory: dict  # part -> bytes
    memory_bytes: float
    fits: bool
    microbatches: int
    comm: dict = field(default_factory=dict)  # what each collective costs, exposed
