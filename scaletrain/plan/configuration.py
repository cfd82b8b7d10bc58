"""What a prediction is for: a strategy with its options on a number of processes, resolved
into the configuration the strategy itself would run — its `ParallelConfig` (the same
`dims`, data-parallel kind, pipeline, local devices and micro-batches)."""

from __future__ import annotations

from typing import Optional

from ..foundation.errors import UsageError
from ..foundation.options import canonical, declared
from ..parallel import ParallelConfig
from ..strategies import REGISTRY, get_strategy


def options_for(strategy: str, options: dict) -> dict:
    """The options among `options` that `strategy` takes (a bench or plan of several strategies
    shares one command line)."""
    cls = REGISTRY[strategy].Options
    takes = {f.name for f in declared(cls)}
    return {k: v for k, v in canonical(cls, options).items() if k in takes and v is not None}


def takes(strategy: str, option: str) -> bool:
    """Whether `strategy` has the option `option` (FSDP's offload, say)."""
    return option in {f.name for f in declared(REGISTRY[strategy].Options)}


def configuration(strategy: str, world_size: int, options: Optional[dict] = None) -> Optional[ParallelConfig]:
    """The configuration `strategy` runs on `world_size` processes, or None when it cannot (degrees
    that do not fit, a one-process strategy on several; a name no strategy has)."""
    if strategy not in REGISTRY:
        return None
    try:
        chosen = get_strategy(strategy, **options_for(strategy, options or {}))
        config = chosen.configuration(world_size)
        if config.pipelined:
            chosen.check_world_size(world_size)
    except UsageError:
        return None
    return config
