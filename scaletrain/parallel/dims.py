"""The parallel dimensions of a run: how many ways each kind of parallelism splits the world.

    pp            pipeline stages: consecutive blocks of the model in different processes
    dp_replicate  data-parallel replicas that hold the whole (stage of the) model
    dp_shard      data-parallel shards: each holds 1/dp_shard of parameters, gradients, state
    cp            context parallel: each sequence split across processes, attention round a ring
    ep            expert parallel: a mixture of experts' experts split across processes — which
                  it borrows from dp_shard × cp rather than adding to the world
    tp            tensor parallel: each layer's matrices split across processes

`MESH` lists them once, outermost first, each with what it means for the rest of the code
(whether its processes read different batches, whether FSDP shards the state over it, whether
its processes hold equal copies, whether it borrows its processes from other dimensions);
everything that walks the dimensions walks this list. The dimensions of their own (`GRID`)
multiply to the world size; a borrowing dimension regroups the processes of the dimensions it
borrows from (`MeshDim.borrows`): its degree divides the product of theirs, and its groups are
consecutive along them (expert parallel's ep groups are neighbours among the dp_shard × cp
processes, each group reading ep different batches). Ranks are laid out row-major over the list: tensor parallel
innermost, so its processes — which talk in every layer — are neighbours on one machine,
context parallel next to it (its ring passes keys and values in every attention); pipeline
stages outermost, so a stage per machine is what a job of several machines gets. A process's
data-parallel rank counts over the dimensions whose processes read different batches
(dp_replicate, dp_shard): tensor- and context-parallel peers read the same batch (the latter
each keep their part of its sequences), a pipeline's stages the same batch too.

Pure values: no torch, so the parent process checks a combination in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..foundation.errors import UsageError, arg

PP, DP_REPLICATE, DP_SHARD, CP, EP, TP = "pp", "dp_replicate", "dp_shard", "cp", "ep", "tp"


@dataclass(frozen=True)
class MeshDim:
    """One dimension of the mesh and what its processes are to each other."""
    name: str
    help: str
    """What the degree means (the help of its option)."""
    metavar: str
    batch: bool = False
    """Its processes read different batches: it counts in the data-parallel size and rank."""
    shards_state: bool = False
    """FSDP shards parameters, gradients and optimizer state over it."""
    replicates: bool = False
    """Its processes hold equal copies of what they train (gradients equal after synchronisation)."""
    composes: bool = True
    """A degree every composable strategy takes (pp is the pipeline's alone)."""
    borrows: tuple = ()
    """The dimensions whose processes it regroups instead of processes of its own (empty: a
    dimension of the grid): its degree divides the product of theirs, and does not multiply
    the world size."""
    leaves: str = ""
    """A borrowing dimension's name for what it leaves of the processes it borrows: the
    groups of processes that hold the same part of what it splits (FSDP shards that part
    over them)."""


#: The mesh's dimensions, outermost first: the one list everything walks.
MESH = (
    MeshDim(PP, "pipeline stages, one process each; the processes they leave are data-parallel replicas of the "
                "pipeline (default: every process a stage)", "P", composes=False),
    MeshDim(DP_REPLICATE, "data-parallel replicas, each holding the whole model (or, with dp_shard, a group of "
                          "shards)", "R", batch=True, replicates=True),
    MeshDim(DP_SHARD, "data-parallel shards: each process holds 1/S of parameters, gradients and optimizer state",
            "S", batch=True, shards_state=True),
    # Context-parallel peers hold the same weights, so FSDP shards them over dp_shard × cp.
    MeshDim(CP, "context-parallel degree: each sequence split N ways (load-balanced for causal attention), "
                "attention computed round a ring of the N processes, which hold the same weights (FSDP shards them "
                "over dp_shard × cp); the built-in GPT, Hugging Face models, or a model whose attention calls "
                "scaled_dot_product_attention", "N", shards_state=True),
    # Experts are split over processes that read different batches (and parts of sequences):
    # tokens travel to their experts by all-to-all, so the degree borrows dp_shard × cp's processes.
    MeshDim(EP, "expert-parallel degree: a mixture-of-experts model's experts split N ways over the data-parallel "
                "(and context-parallel) processes, which it borrows: N divides dp_shard × cp and adds no processes; "
                "each token travels to its experts and back by all-to-all; FSDP shards each process's experts over "
                "the dp_shard × cp ÷ N processes that hold the same ones", "N",
            borrows=(DP_SHARD, CP), leaves="expert_shard"),
    MeshDim(TP, "tensor-parallel degree: each layer's matrices split N ways, by the model's own plan (stdlib-gpt; "
                "Hugging Face models that declare one, such as Llama) or by --parallelize", "N"),
)
MESH_DIMS = tuple(d.name for d in MESH)
BY_NAME = {d.name: d for d in MESH}
#: The dimensions of their own, outermost first: they multiply to the world size, and the
#: ranks are laid out row-major over them (the DeviceMesh's shape).
GRID = tuple(d for d in MESH if not d.borrows)
GRID_DIMS = tuple(d.name for d in GRID)
#: The dimensions that regroup others' processes.
BORROWING = tuple(d for d in MESH if d.borrows)


class ParallelDims:
    """The degree of every mesh dimension (1 where not split), as one frozen value:
    `ParallelDims(pp=2, tp=2)`, `dims.tp`, `dims.degrees()`."""

    __slots__ = ("_degrees", "devices_per_process")

    def __init__(self, devices_per_process: int = 1, **degrees: int):
        unknown = [name for name in degrees if name not in BY_NAME]
        if unknown:
            raise TypeError(f"not mesh dimensions: {', '.join(unknown)} (they are {', '.join(MESH_DIMS)})")
        object.__setattr__(self, "_degrees", tuple(int(degrees.get(name, 1)) for name in MESH_DIMS))
        object.__setattr__(self, "devices_per_process", devices_per_process)
        """Devices one process drives itself (dp, mp, DDP + model parallel): not a mesh dimension."""

    def __getattr__(self, name: str) -> int:
        if name in BY_NAME:
            return self._degrees[MESH_DIMS.index(name)]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        raise AttributeError("ParallelDims is frozen")

    def __eq__(self, other) -> bool:
        return isinstance(other, ParallelDims) and (self._degrees, self.devices_per_process) == (
            other._degrees, other.devices_per_process)

    def __hash__(self) -> int:
        return hash((self._degrees, self.devices_per_process))

    def __repr__(self) -> str:
        given = ", ".join(f"{name}={self[name]}" for name in self.enabled())
        extra = f", devices_per_process={self.devices_per_process}" if self.devices_per_process != 1 else ""
        return f"ParallelDims({given}{extra})"

    def __reduce__(self):
        return _dims, (self.devices_per_process, self.degrees())

    def __getitem__(self, name: str) -> int:
        return self._degrees[MESH_DIMS.index(name)]

    @property
    def world_size(self) -> int:
        return math.prod(self[name] for name in GRID_DIMS)

    @property
    def dp_size(self) -> int:
        """Data-parallel size: how many different batches one optimizer step sees."""
        return math.prod(self[d.name] for d in MESH if d.batch)

    @property
    def shards(self) -> int:
        """How many ways FSDP shards the state (the product of the dimensions it shards over)."""
        return math.prod(self[d.name] for d in MESH if d.shards_state)

    def span(self, name: str) -> int:
        """How many consecutive ranks one group of dimension `name` spans: its degree times
        those of the dimensions inside it (a group that does not fit one machine crosses the
        network); a borrowing dimension's groups are consecutive along the last dimension
        it borrows."""
        dim = BY_NAME[name]
        if not dim.borrows:
            return math.prod(self[n] for n in GRID_DIMS[GRID_DIMS.index(name):])
        return self[name] * math.prod(self[n] for n in GRID_DIMS[GRID_DIMS.index(dim.borrows[-1]) + 1:])

    def lent(self, name: str) -> int:
        """The processes borrowing dimension `name` regroups: the product of the degrees it borrows."""
        return math.prod(self[n] for n in BY_NAME[name].borrows)

    def degrees(self) -> dict[str, int]:
        return dict(zip(MESH_DIMS, self._degrees))

    def enabled(self) -> tuple[str, ...]:
        """The dimensions of more than one process, outermost first."""
        return tuple(name for name, size in zip(MESH_DIMS, self._degrees) if size > 1)

    def coordinates(self, rank: int) -> dict[str, int]:
        """This rank's index along each dimension (a borrowing one's: its place in its group,
        the innermost factor of the row-major index over the dimensions it borrows)."""
        coords = {}
        for name in reversed(GRID_DIMS):
            coords[name] = rank % self[name]
            rank //= self[name]
        for dim in BORROWING:
            index = 0
            for lender in dim.borrows:
                index = index * self[lender] + coords[lender]
            coords[dim.name] = index % self[dim.name]
        return {name: coords[name] for name in MESH_DIMS}

    def dp_rank(self, rank: int) -> int:
        """Which of the dp_size batches this rank reads (row-major over the batch dimensions)."""
        c = self.coordinates(rank)
        index = 0
        for d in MESH:
            if d.batch:
                index = index * self[d.name] + c[d.name]
        return index

    @property
    def composed(self) -> bool:
        """Whether the mesh says more than the number of processes: several dimensions in use,
        or one whose processes do not each hold a whole stage or batch (tensor parallel)."""
        enabled = self.enabled()
        return len(enabled) > 1 or any(not (BY_NAME[name].batch or name == PP) for name in enabled)

    def describe(self) -> str:
        """'pp 2 × dp_shard 2 × tp 2' (the dimensions in use), '1 process' when none; a
        borrowing dimension after them: 'dp_shard 4 with ep 2'."""
        used = [f"{name} {self[name]}" for name in self.enabled() if not BY_NAME[name].borrows]
        grid = " × ".join(used) if used else "1 process"
        return " ".join([grid, *(f"with {d.name} {self[d.name]}" for d in BORROWING if self[d.name] > 1)])

    def as_dict(self) -> dict:
        return {**self.degrees(), "devices_per_process": self.devices_per_process}


def _dims(devices_per_process: int, degrees: dict) -> ParallelDims:
    return ParallelDims(devices_per_process, **degrees)


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
    fixed = math.prod(degrees[name] for name in GRID_DIMS if name != fill or given.get(name) is not None)
    if fill is not None and given.get(fill) is None:
        if world_size % fixed:
            raise UsageError(_mismatch(world_size, degrees, given, fill, fixed, labels))
        degrees[fill] = world_size // fixed
    elif fixed != world_size:
        raise UsageError(_mismatch(world_size, degrees, given, fill, fixed, labels))
    dims = ParallelDims(**degrees, devices_per_process=devices_per_process)
    for dim in BORROWING:
        _check_borrowed(dims, dim, labels)
    return dims


def _check_borrowed(dims: ParallelDims, dim: MeshDim, labels: dict) -> None:
    """A borrowing degree must divide the processes it borrows (the fix: a degree that does)."""
    degree, lent = dims[dim.name], dims.lent(dim.name)
    if lent % degree == 0:
        return
    lenders = " × ".join(f"{n} {dims[n]}" for n in dim.borrows)
    fits = [d for d in range(2, lent + 1) if lent % d == 0]
    fix = (f"use {' or '.join(arg(labels.get(dim.name, dim.name), d) for d in fits)}" if fits else
           f"give more processes to {' or '.join(dim.borrows)}, or drop {arg(labels.get(dim.name, dim.name))}")
    raise UsageError(f"{arg(labels.get(dim.name, dim.name), degree)} regroups the processes of {lenders} = {lent} "
                     f"(it adds none of its own), so it must divide {lent}; {fix}")


def _mismatch(world_size: int, degrees: dict, given: dict, fill: Optional[str], fixed: int, labels: dict) -> str:
    named = [name for name in GRID_DIMS if given.get(name) is not None]
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
