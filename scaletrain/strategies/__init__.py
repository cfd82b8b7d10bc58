"""The registry of strategies: name -> Strategy class. Add a strategy by registering it here."""

from __future__ import annotations

from ..errors import UsageError
from .base import Strategy
from .ddp import DDPStrategy
from .dp import DataParallelStrategy
from .fsdp import FSDPStrategy
from .hybrid import HybridStrategy
from .mp import ModelParallelStrategy
from .pipeline import PipelineStrategy
from .single import SingleStrategy

REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    REGISTRY[cls.name] = cls
    return cls


for _cls in (SingleStrategy, DataParallelStrategy, ModelParallelStrategy, DDPStrategy, HybridStrategy,
             PipelineStrategy, FSDPStrategy):
    register(_cls)


def strategy_names() -> list[str]:
    return list(REGISTRY)


def get_strategy(name: str, **options) -> Strategy:
    if isinstance(name, Strategy):
        return name
    if name not in REGISTRY:
        raise UsageError(f"unknown strategy {name!r}; choose one of: {', '.join(REGISTRY)} (--strategy)")
    return REGISTRY[name](**options)
