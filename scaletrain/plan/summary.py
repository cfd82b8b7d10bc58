"""A plan over several rounds of measurement: each round predicts everything, and every
predicted figure is the median over the rounds with its 95% interval — the plan's expected
error, as far as the measurements' own noise goes."""

from __future__ import annotations

import statistics
from dataclasses import fields, replace
from typing import Optional

from ..measure.spread import Spread, ratio_spread
from ..parallel.dims import MESH_DIMS
from .predict import Prediction
from .probe import Compute, Probe
from .probe_link import Link

_MEDIAN_FIELDS = ("compute_s", "comm_s", "exposed_comm_s", "step_s", "samples_per_s", "speedup", "efficiency",
                  "memory_bytes")


def key(p: Prediction) -> tuple:
    """(strategy, world size), and the mesh's dimensions where degrees were given: one
    strategy on one world size may then be several configurations."""
    given = any(p.options.get(name) is not None for name in MESH_DIMS)
    return (p.strategy, p.world_size, p.mesh) if given else (p.strategy, p.world_size)


def median_predictions(rounds: list[list[Prediction]]) -> tuple[list[Prediction], dict]:
    """(one Prediction per strategy and world size with the median of each figure over the
    rounds, {(strategy, world size): Spread of the predicted speedup})."""
    by_key: dict[tuple, list[Prediction]] = {}
    for predictions in rounds:
        for p in predictions:
            by_key.setdefault(key(p), []).append(p)
    medians, spreads = [], {}
    for k, ps in by_key.items():
        values = {name: statistics.median(getattr(p, name) for p in ps) for name in _MEDIAN_FIELDS}
        medians.append(replace(ps[0], **values))
        spreads[k] = ratio_spread([p.speedup for p in ps])
    return medians, spreads


def expected_error(spreads: dict) -> Optional[float]:
    """The largest distance of a 95% interval's end from its median, relative to the median."""
    known = [s for s in spreads.values() if s is not None and s.known and s.median > 0]
    if not known:
        return None
    return max(max(s.high / s.median - 1, 1 - s.low / s.median) for s in known)


def median_probe(probes: list[Probe]) -> Probe:
    """One Probe whose every measured time is the median over the rounds (for showing)."""
    first = probes[0]
    compute = {}
    for t in first.compute:
        values = [p.compute[t] for p in probes if t in p.compute]
        compute[t] = Compute(*(statistics.median(getattr(c, f.name) for c in values) for f in fields(Compute)))
    link = first.link
    if link is not None and all(p.link is not None for p in probes):
        link = Link(alpha_s=statistics.median(p.link.alpha_s for p in probes),
                    busbw=statistics.median(p.link.busbw for p in probes), nproc=link.nproc, source=link.source,
                    points=tuple((size, statistics.median(p.link.busbw_for(size) for p in probes))
                                 for size, _ in link.points),
                    gather_ratio=statistics.median(p.link.gather_ratio for p in probes),
                    scatter_ratio=statistics.median(p.link.scatter_ratio for p in probes))
    steps = {name: _median_step(probes, name, times) for name, times in
             (("ddp_step", ("step_s", "local_step_s")), ("network_ddp_step", ("step_s", "local_step_s")),
              ("tp_step", ("step_s",)), ("network_fsdp_step", ("step_s",)), ("ring_mesh", ("step_s",)))}
    return replace(first, compute=compute, link=link, **steps)


def _median_step(probes: list[Probe], name: str, times: tuple):
    """The rounds' measured step `name` (DdpStep, MeshStep) with each of its `times` the median over
    them; the first round's where some round has none."""
    first = getattr(probes[0], name)
    if first is None or any(getattr(p, name) is None for p in probes):
        return first
    return replace(first, **{t: statistics.median(getattr(getattr(p, name), t) for p in probes) for t in times})


def step_spreads(probes: list[Probe]) -> dict[int, Spread]:
    """threads -> the spread of the measured step time over the rounds."""
    return {t: ratio_spread([p.compute[t].step_s for p in probes if t in p.compute]) for t in probes[0].compute}
