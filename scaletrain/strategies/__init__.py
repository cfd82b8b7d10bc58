"""The registry of strategies: name -> Strategy class. A strategy is a preset of the
parallelisms (scaletrain.parallel): add one by writing its module (options and Strategy
subclass) and registering its class here."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError, arg
from ..parallel import Prepared
from .auto import AutoStrategy
from .base import CommonOptions, MeshOptions, Strategy
from .ddp import DDPStrategy
from .dp import DataParallelStrategy
from .fsdp import FSDPStrategy
from .hybrid import HybridStrategy
from .mp import ModelParallelStrategy
from .pipeline import PipelineStrategy
from .single import SingleStrategy
from .tp import TensorParallelStrategy

REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    REGISTRY[cls.name] = cls
    return cls


for _cls in (SingleStrategy, DataParallelStrategy, ModelParallelStrategy, DDPStrategy, HybridStrategy,
             PipelineStrategy, FSDPStrategy, TensorParallelStrategy, AutoStrategy):
    register(_cls)


def strategy_names() -> list[str]:
    return list(REGISTRY)


def get_strategy(name: str | Strategy, **options: Any) -> Strategy:
    """The strategy `name` with `options` (keyword arguments of scaletrain.init)."""
    if isinstance(name, Strategy):
        if options:
            raise UsageError("give options either to the Strategy object or as keywords, not both")
        return name
    if name not in REGISTRY:
        raise UsageError(f"unknown {arg('strategy', name)}; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[name](**options)


def implied_strategy(options: dict[str, Any]) -> str:
    """The strategy a command line means when it gives degrees but no strategy: pipeline
    with --pp, fsdp with --dp-shard, --dp-replicate or --cp (alone or with --tp), tp with
    --tp alone; else ddp."""
    if options.get("pp") is not None or options.get("pipeline_stages") is not None:
        return "pipeline"
    if options.get("dp_shard") is not None or options.get("dp_replicate") is not None or options.get("cp") is not None:
        return "fsdp"
    if options.get("tp") is not None:
        return "tp"
    return "ddp"


__all__ = ["REGISTRY", "implied_strategy", "Strategy", "Prepared", "CommonOptions", "MeshOptions", "get_strategy", "strategy_names",
           "register"]
