"""Whether `scaletrain train` runs a cluster plan's configuration as the plan prints it: the
strategy and options its `Run it:` line names (`train_strategy`, which the printed flags are
made from) are given to train's own strategy and checked as train checks them (its world size,
its compositions: a pipeline with context parallel, float8 with tensor parallel, ...); a
pipeline schedule train has not (interleaved: train's are gpipe and 1f1b) and a layout train
would fill differently are refused too, and so is what train refuses of a mixture of experts
(its model's checks, `strategies/base.py`'s `check_model`: a mixture cut into pipeline stages;
tensor parallel of Hugging Face's MoE models, whose plan names experts' styles torch's tensor
parallel has not). A configuration train refuses is listed as "not runnable by train" and
never chosen."""

from __future__ import annotations

from ...foundation.errors import UsageError, as_flags
from ...parallel.dims import MESH_DIMS
from ...workloads.model_shapes import ModelShape
from .config import ClusterConfig


def train_strategy(config: ClusterConfig, microbatches: int) -> tuple[str, dict]:
    """(strategy, options) of the `scaletrain train` run of this configuration."""
    options: dict = {}
    if config.pp > 1:
        name = "pipeline"
        options.update(pp=config.pp, microbatches=microbatches)
    else:
        name = "fsdp" if config.dp_shard > 1 else ("tp" if config.tp > 1 and config.dp_replicate == 1 else "ddp")
        if microbatches > 1:
            options["grad_accum"] = microbatches
    if config.dp_shard > 1:
        options["dp_shard"] = config.dp_shard
        if config.dp_replicate > 1:
            options["dp_replicate"] = config.dp_replicate
    for dim in ("tp", "cp", "ep"):
        if config.dims[dim] > 1:
            options[dim] = config.dims[dim]
    if config.checkpointing != "none":
        options["activation_checkpointing"] = config.checkpointing
    if config.compile:
        options["compile"] = True
    options["precision"] = "float8" if config.float8 else "bf16"
    return name, options


def train_refusal(config: ClusterConfig, microbatches: int, shape: ModelShape) -> str:
    """Why `scaletrain train` cannot run `config` (of a model of `shape`) as its printed flags
    say ("" where it can)."""
    from ...strategies import get_strategy

    if shape.experts and config.pp > 1:
        return "train does not cut a mixture of experts into pipeline stages (its router's balance loss would be lost)"
    if shape.experts and config.tp > 1:
        return ("train's tensor parallel does not split a Hugging Face mixture of experts (its plan's experts styles, "
                "packed_colwise and moe_tp_experts, are not torch's)")
    if config.pp > 1 and config.schedule != "1f1b":
        return f"train's pipeline schedules are gpipe and 1f1b, not {config.schedule}"
    if config.checkpointing not in ("none", "selective", "full"):
        return f"train's activation checkpointing is none, selective or full, not {config.checkpointing}"
    name, options = train_strategy(config, microbatches)
    try:
        strategy = get_strategy(name, **options)
        strategy.check_world_size(config.world)
        dims = strategy.dims(config.world)
    except UsageError as exc:
        return as_flags(exc.raw)
    if any(dims[d] != config.dims[d] for d in MESH_DIMS):
        return f"train would run {dims.describe()}, not {config.dims.describe()}"
    return ""
