"""The registry of strategies: name -> Strategy class. A strategy is a preset of the
parallelisms (scaletrain.parallel): add one by writing its module (options and Strategy
subclass) and registering its class here."""

from __future__ import annotations

from typing import Any

from ..foundation.errors import UsageError, arg
from ..foundation.options import canonical
from ..parallel import Prepared
from ..parallel.dims import MESH_DIMS, PP, TP
from .auto import AutoStrategy
from .base import CommonOptions, MeshOptions, Strategy
from .ddp import DDPStrategy
from .ddp_mp import DDPModelParallelStrategy
from .dp import DataParallelStrategy
from .fsdp import FSDPStrategy
from .mp import ModelParallelStrategy
from .pipeline import PipelineStrategy
from .single import SingleStrategy
from .tp import TensorParallelStrategy

REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    REGISTRY[cls.name] = cls
    return cls


for _cls in (SingleStrategy, DataParallelStrategy, ModelParallelStrategy, DDPStrategy, DDPModelParallelStrategy,
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


def baseline_strategy() -> str:
    """The one-process, one-device reference's name."""
    return next(name for name, cls in REGISTRY.items() if cls.baseline)


def implied_strategy(options: dict[str, Any]) -> str:
    """The strategy a command line means when it gives degrees but no strategy: pipeline
    with --pp, tp with --tp alone, fsdp with any other degree of the mesh; else ddp."""
    given = {name for name, value in canonical(PipelineStrategy.Options, options).items() if value is not None}
    degrees = given & {name for name in MESH_DIMS}
    if PP in degrees:
        return PipelineStrategy.name
    if degrees - {TP}:
        return FSDPStrategy.name
    if degrees:
        return TensorParallelStrategy.name
    return DDPStrategy.name


__all__ = ["REGISTRY", "baseline_strategy", "implied_strategy", "Strategy", "Prepared", "CommonOptions", "MeshOptions", "get_strategy", "strategy_names",
           "register"]
