"""The parallel dimensions of a run: how many ways each kind of parallelism splits the world.

    pp            pipeline stages: consecutive blocks of the model in different processes
    dp_replicate  data-parallel replicas that hold the whole (stage of the) model
    dp_shard      data-parallel shards: each holds 1/dp_shard of parameters, gradients, state
    cp            context parallel: each sequence split across processes, attention round a ring
    tp            tensor parallel: each layer's matrices split across processes

They multiply to the world size. Ranks are laid out row-major over (pp, dp_replicate,
dp_shard, cp, tp): tensor parallel innermost, so its processes — which talk in every layer — are
neighbours on one machine, context parallel next to it (its ring passes keys and values in
every attention); pipeline stages outermost, so a stage per machine is what a job of several
machines gets. A process's data-parallel rank counts over (dp_replicate, dp_shard):
tensor- and context-parallel peers read the same batch, a pipeline's stages the same batch too.

Pure values: no torch, so the parent process checks a combination in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..errors import UsageError, arg

#: The mesh's dimensions, outermost first.
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass(frozen=True)
class ParallelDims:
    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    tp: int = 1
    devices_per_process: int = 1
    """Devices one process drives itself (dp, mp, hybrid): not a mesh dimension."""

    @property
    def world_size(self) -> int:
        return math.prod(self.degrees().values())

    @property
    def dp_size(self) -> int:
        """Data-parallel size: how many different batches one optimizer step sees."""
        return self.dp_replicate * self.dp_shard

    def degrees(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in MESH_DIMS}

    def enabled(self) -> tuple[str, ...]:
        """The dimensions of more than one process, outermost first."""
        return tuple(name for name in MESH_DIMS if getattr(self, name) > 1)

    def coordinates(self, rank: int) -> dict[str, int]:
        """This rank's index along each dimension."""
        coords = {}
        for name in reversed(MESH_DIMS):
            size = getattr(self, name)
            coords[name] = rank % size
            rank //= size
        return {name: coords[name] for name in MESH_DIMS}

    def dp_rank(self, rank: int) -> int:
        c = self.coordinates(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    def describe(self) -> str:
        """'pp 2 × dp_shard 2 × tp 2' (the dimensions in use), '1 process' when none."""
        used = [f"{name} {getattr(self, name)}" for name in self.enabled()]
        return " × ".join(used) if used else "1 process"

    def as_dict(self) -> dict:
        return {**self.degrees(), "devices_per_process": self.devices_per_process}


def _check_degree(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{arg(name, value)}: give a whole number of processes, at least 1")


def resolve_dims(world_size: int, given: dict[str, Optional[int]], fill: Optional[str],
                 devices_per_process: int = 1, labels: Optional[dict[str, str]] = None) -> ParallelDims:
    """The dimensions of `world_size` processes: the degrees `given` (None: not given) and
    `fill`, which takes the processes the others leave (None: nothing fills, the given
    degrees must make up the world). One UsageError lists every factor and the fix, naming
    each degree by its setting (`labels`: another name the user gave it by)."""
    labels = labels or {}
    degrees = {name: 1 for name in MESH_DIMS}
    for name, value in given.items():
        if value is not None:
            _check_degree(labels.get(name, name), value)
            degrees[name] = value
    fixed = math.prod(degrees[name] for name in MESH_DIMS if name != fill or given.get(name) is not None)
    if fill is not None and given.get(fill) is None:
        if world_size % fixed:
            raise UsageError(_mismatch(world_size, degrees, given, fill, fixed, labels))
        degrees[fill] = world_size // fixed
    elif fixed != world_size:
        raise UsageError(_mismatch(world_size, degrees, given, fill, fixed, labels))
    return ParallelDims(**degrees, devices_per_process=devices_per_process)


def _mismatch(world_size: int, degrees: dict, given: dict, fill: Optional[str], fixed: int, labels: dict) -> str:
    named = [name for name in MESH_DIMS if given.get(name) is not None]
    filling = fill is not None and given.get(fill) is None
    factors = " × ".join(arg(labels.get(name, name), degrees[name]) for name in named) or "1"
    fixes = [f"run {'a multiple of ' if filling else ''}{fixed} processes ({arg('nproc_per_node')} × nodes)"]
    for name in named:  # or change one degree so that the product fits
        room, left = divmod(world_size, fixed // degrees[name])
        if left:
            continue
        label = labels.get(name, name)
        if not filling:
            fixes.append(arg(label, room))
        else:  # the largest degree up to the one given that leaves whole processes to fill
            fitting = max(d for d in range(1, min(room, degrees[name]) + 1) if room % d == 0)
            if fitting != degrees[name]:
                fixes.append(arg(label, fitting))
    product = f"{factors} = {fixed}" if len(named) > 1 else factors
    what = (f"{product} needs {fixed} processes or a multiple, but the world is {world_size}" if filling and fixed > world_size
            else f"{product} does not divide the {world_size} processes that {arg(labels.get(fill, fill))} would "
            f"share out" if filling
            else f"{product}, but the world is {world_size} process(es)")
    return f"the parallel degrees do not fit: {what}; the degrees must multiply to the world size: " \
           f"{' or '.join(dict.fromkeys(fixes))}"
