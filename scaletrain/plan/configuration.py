"""What a prediction is for: a strategy with its options on a number of processes, resolved
into the parallel dimensions the strategy itself would run (the same `dims`), how its
data-parallel dimensions synchronise, and the pipeline's micro-batches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import UsageError
from ..parallel.dims import ParallelDims
from ..strategies import REGISTRY, get_strategy


@dataclass(frozen=True)
class Configuration:
    strategy: str
    world_size: int
    dims: ParallelDims
    data_parallel: Optional[str]
    pipelined: bool
    local_devices: Optional[str]
    microbatches: int
    options: dict = field(default_factory=dict)
    """The strategy options given (degrees, micro-batches, ...)."""

    @property
    def label(self) -> str:
        """'fsdp ×4', or 'fsdp ×4 (dp_shard 2 × tp 2)' when the strategy composes dimensions."""
        plain = self.dims.enabled() in ((), ("dp_replicate",), ("dp_shard",), ("pp",))
        return f"{self.strategy} ×{self.world_size}" + ("" if plain else f" ({self.dims.describe()})")


def options_for(strategy: str, options: dict) -> dict:
    """The options among `options` that `strategy` takes (a bench or plan of several strategies
    shares one command line)."""
    from ..options import declared

    takes = {f.name for f in declared(REGISTRY[strategy].Options)}
    return {k: v for k, v in options.items() if k in takes and v is not None}


def configuration(strategy: str, world_size: int, options: Optional[dict] = None,
           default_microbatches: Optional[int] = None) -> Optional[Configuration]:
    """The configuration `strategy` runs on `world_size` processes, or None when it cannot (degrees
    that do not fit, a one-process strategy on several)."""
    given = options_for(strategy, options or {})
    try:
        chosen = get_strategy(strategy, **given)
        dims = chosen.dims(world_size)
        if chosen.pipelined:
            chosen.check_world_size(world_size)
    except UsageError:
        return None
    if chosen.pipelined:
        microbatches = given.get("microbatches") or default_microbatches or dims.pp
    else:
        microbatches = given.get("microbatches", 1)
    return Configuration(strategy, world_size, dims, chosen.data_parallel(dims), chosen.pipelined, chosen.local_devices,
                  microbatches, given)
