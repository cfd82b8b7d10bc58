"""What the user fixed when letting scaletrain choose — `train --strategy auto --tp 2`,
`plan --choose --strategy fsdp --dp-replicate 2` — and the candidates that keep it.

A choice is made among the candidates that keep every degree and option given (a degree as
the configuration resolves it: `fsdp` on 2 processes has dp_shard 2 whether or not it names
it), so it never chooses what it must then refuse ("--tp 2 does not apply to --strategy
ddp"). A set of them that no configuration of the world size can keep — a degree that does
not divide it, a model without a tensor-parallel plan, heads that do not split — is refused
in one line before anything is measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..foundation.errors import UsageError, arg
from ..foundation.options import canonical
from ..parallel.dims import MESH_DIMS
from ..strategies import REGISTRY, get_strategy, implied_strategy
from ..strategies.pipeline import PipelineStrategy
from .configuration import configuration, takes

#: Options that shape a candidate besides its degrees, with the value a candidate that does
#: not name them has.
SHAPE_DEFAULTS = {"microbatches": None, "activation_checkpointing": "none"}


@dataclass(frozen=True)
class Constraints:
    strategies: tuple = ()
    """The strategies a choice may take (empty: any)."""
    options: dict = field(default_factory=dict)
    """The options given, by their canonical names (None values left out)."""

    @classmethod
    def given(cls, options: dict, strategies: tuple = ()) -> "Constraints":
        named = canonical(PipelineStrategy.Options, {k: v for k, v in options.items() if v is not None})
        return cls(tuple(strategies), {k: v for k, v in named.items() if v is not None})

    def __bool__(self) -> bool:
        return bool(self.strategies or self.options)

    def describe(self) -> str:
        parts = [f"--strategy {','.join(self.strategies)}"] if self.strategies else []
        return " ".join(parts + [f"--{k.replace('_', '-')} {v}" for k, v in self.options.items()])

    def keeps(self, name: str, options: dict, world_size: int) -> bool:
        """Whether the candidate (`name`, `options`) on `world_size` processes is one the user's
        settings allow: its strategy allowed, every option given taken by it, every degree and
        shape given the candidate's own."""
        if self.strategies and name not in self.strategies:
            return False
        if any(not takes(name, key) for key in self.options):
            return False
        config = configuration(name, world_size, options)  # what is predicted for the candidate
        if config is None:
            return False
        for dim in MESH_DIMS:
            if dim in self.options and getattr(config.dims, dim) != self.options[dim]:
                return False
        return all(options.get(key, default) == self.options[key]
                   for key, default in SHAPE_DEFAULTS.items() if key in self.options)

    def candidates(self, found: list, world_size: int) -> list:
        """The (strategy, options) pairs of `found` that keep the constraints (the options given
        that do not shape a candidate, such as precision, are the run's to add); a UsageError
        when none does."""
        kept = [(name, options) for name, options in found if self.keeps(name, options, world_size)]
        if not kept and self:
            raise UsageError(f"no configuration of {world_size} process(es) that scaletrain can predict keeps "
                             f"{self.describe()}; drop some of them, or train that configuration itself "
                             "(without auto)")
        return kept


def check_possible(constraints: Constraints, world_size: int, model, batch_size: Optional[int]) -> None:
    """Before measuring: one strategy allowed runs the options given on `world_size` processes
    with this model (built on the meta device: its structure only), or the refusal of the one
    those options imply (`--tp 2` alone: tp) in one line."""
    if not constraints:
        return
    names = list(constraints.strategies) or [n for n, cls in REGISTRY.items() if cls.multi_process]
    implied = implied_strategy(constraints.options)
    names.sort(key=lambda n: n != implied)  # its refusal is the one that speaks to these options
    first: Optional[UsageError] = None
    for name in names:
        try:
            unknown = [k for k in constraints.options if not takes(name, k)]
            if unknown:
                raise UsageError(f"{arg(unknown[0], constraints.options[unknown[0]])} does not apply to "
                                 f"{arg('strategy', name)}")
            get_strategy(name, **constraints.options).preflight(world_size, model, batch_size)
            return
        except UsageError as exc:
            first = first or exc
    raise first


def predictable(strategies: list[str], world_sizes: list[int], options: dict, model,
                batch_size: Optional[int]) -> tuple[list[tuple[str, int]], list[str]]:
    """((strategy, world size) a plan can predict, notes on those it cannot): the degrees given
    must fit the world size and split this model (built on the meta device) as the strategy
    itself checks it. Measuring for none of them would end in an empty table."""
    from .configuration import options_for

    kept, notes = [], []
    for name in strategies:
        given = options_for(name, options)
        for n in world_sizes:
            if configuration(name, n, given) is None:
                shown = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in given.items())
                notes.append(f"{name} on {n} process(es): its degrees ({shown or 'its own'}) do not fit that many")
                continue
            try:
                get_strategy(name, **given).check_model(n, model, batch_size)
            except UsageError as exc:
                notes.append(f"{name} on {n} process(es): {exc.raw}")
                continue
            kept.append((name, n))
    return kept, notes


def constraints_of(candidates) -> Constraints:
    """What a choice must keep: the strategies and options a request's `Candidates` name
    (plan --choose --strategy …, the degrees given beside --strategy auto)."""
    return Constraints.given(candidates.options, tuple(candidates.strategies))


def check_candidates(request, workload) -> None:
    """Before measuring: a choice's constraints can be kept on its world size, and a plan's
    configurations include one that can be predicted (else the one line `bench` gives for the
    same degrees). Both read only the model's structure (built on the meta device)."""
    from ..workloads.meta import meta_model

    c, batch = request.candidates, request.training.batch_size
    if c.choose is not None:
        check_possible(constraints_of(c), c.choose, meta_model(workload), batch)
        return
    if c.listed or not c.strategies:
        return  # bench's configurations, checked by bench itself
    kept, notes = predictable(list(c.strategies), list(c.world_sizes), c.options, meta_model(workload), batch)
    if not kept:
        raise UsageError(f"nothing to predict: {'; '.join(notes[:3])}{' …' if len(notes) > 3 else ''}; give "
                         "degrees that divide --world-sizes and split the model (or leave them out)")


def left_out_notes(request) -> list[str]:
    """Conclusions naming what a plan could not predict of what was asked, where degrees were
    given (the defaults' gaps, such as tp for a model without a plan, go unsaid)."""
    from ..foundation.errors import as_flags
    from ..workloads import get_workload
    from ..workloads.meta import meta_model

    c, t = request.candidates, request.training
    if c.choose is not None or c.listed or not any(v is not None for v in c.options.values()):
        return []
    model = meta_model(get_workload(t.workload, t.model, t.dataset))
    _, notes = predictable(list(c.strategies), list(c.world_sizes), c.options, model, t.batch_size)
    return [f"Left out: {as_flags(note)}." for note in notes]
