"""The cost terms of the parallelisms: one module per parallelism of
`scaletrain.parallel.PARALLELISMS`, named as the parallelism, each turning measurements into
what that parallelism adds to a step (`terms.Terms`, `terms.MemoryParts`); `step.step_cost`
composes them for a configuration. Adding a parallelism's costs is adding its module here."""

from __future__ import annotations

import importlib
from types import ModuleType

from ...parallel import PARALLELISMS
from ...parallel.config import ParallelConfig


class NoCost(Exception):
    """A configuration enables a parallelism the planner has no cost terms for."""

    def __init__(self, parallelism: str):
        super().__init__(parallelism)
        self.parallelism = parallelism


def cost_module(parallelism: str) -> ModuleType:
    """The cost module of the parallelism named `parallelism` (NoCost where there is none)."""
    try:
        return importlib.import_module(f"{__name__}.{parallelism}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{parallelism}":
            raise
        raise NoCost(parallelism) from None


def token_share(modules: list[ModuleType], config: ParallelConfig) -> float:
    """The share of each sequence's tokens a process computes, by the modules that split them
    (`token_share(config)`: context parallel's 1/cp)."""
    share = 1.0
    for m in modules:
        if hasattr(m, "token_share"):
            share *= m.token_share(config)
    return share


def enabled_modules(config: ParallelConfig) -> list[ModuleType]:
    """The cost modules of the parallelisms `config` enables, in the order they are applied."""
    return [cost_module(p.name) for p in PARALLELISMS if p.enabled(config)]
