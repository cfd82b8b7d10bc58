"""The one owner of a run's topology: its parallel dimensions, its device mesh, and the
answers every other part asks of them — this process's data-parallel rank and size, the
group of each dimension, who holds the model's outputs, whether gradients and state are
sharded.

Strategies, loaders, the loss scaler, evaluation and checkpoints all ask a `Topology`; none
of them builds a mesh or a process group of its own. The mesh has the dimensions of
`dims.GRID` (those of size 1 included, so every dimension can be named) and is built on
first use: a plain DDP run never needs one. A borrowing dimension (`dims.MeshDim.borrows`:
expert parallel's ep) is the processes it borrows, flattened and cut again into (what it
leaves, itself): a view of the same mesh, so DTensors on it and FSDP's meshes combine.
"""

from __future__ import annotations

from typing import Optional

import torch.distributed as dist

from ..process.process_context import ProcessContext
from .dims import BORROWING, BY_NAME, GRID, GRID_DIMS, PP, ParallelDims


class Topology:
    def __init__(self, dims: ParallelDims, ctx: ProcessContext):
        self.ctx = ctx
        self._mesh = None
        self._regrouped: dict = {}
        self.reshape(dims)

    def reshape(self, dims: ParallelDims) -> None:
        """Settle the dimensions anew before any mesh is built (the library's `auto`, which
        decides at setup whether its data-parallel dimension replicates or shards)."""
        assert self._mesh is None, "the mesh is built already"
        self.dims = dims
        self.coords = dims.coordinates(self.ctx.rank)

    # -- where this process stands -----------------------------------------------------
    @property
    def dp_rank(self) -> int:
        """Which data-parallel shard of every global batch this process reads."""
        return self.dims.dp_rank(self.ctx.rank)

    @property
    def dp_size(self) -> int:
        return self.dims.dp_size

    @property
    def stage(self) -> int:
        return self.coords[PP]

    @property
    def stages(self) -> int:
        return self.dims.pp

    @property
    def holds_outputs(self) -> bool:
        """Whether this process computes the model's outputs and the loss (a pipeline's last
        stage; every process otherwise, tensor-parallel peers alike)."""
        return self.stage == self.stages - 1

    @property
    def reports_outputs(self) -> bool:
        """Whether this process's outputs count in metrics: one process per data-parallel
        shard (tensor-parallel peers compute the same outputs; a pipeline's first stages none)."""
        # Tensor- and context-parallel peers compute the same outputs (a borrowing dimension's
        # processes are the batch dimensions' own, each reporting its batch).
        peers = [d.name for d in GRID if not d.batch and d.name != PP]
        return self.holds_outputs and all(self.coords[name] == 0 for name in peers)

    @property
    def output_reporters(self) -> int:
        """How many processes report outputs: metrics are averaged over them."""
        return self.dp_size

    @property
    def gradients_differ(self) -> bool:
        """Whether processes hold different gradients after synchronisation (shards, tensor
        parallel slices, pipeline stages): a gradient norm or an fp16 overflow must then be
        agreed over every process."""
        return any(not BY_NAME[name].replicates for name in self.dims.enabled())

    @property
    def shards_state(self) -> bool:
        """Whether no process holds the whole model (large ones are checkpointed sharded)."""
        return self.gradients_differ

    # -- the mesh and its groups -------------------------------------------------------
    @property
    def mesh(self):
        """The DeviceMesh over every process, dimensions named as in GRID_DIMS (built once)."""
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            shape = tuple(self.dims[name] for name in GRID_DIMS)
            self._mesh = init_device_mesh(self.ctx.device.type, shape, mesh_dim_names=GRID_DIMS)
        return self._mesh

    def submesh(self, *names: str):
        """The mesh of some dimensions (e.g. "dp_replicate", "dp_shard" for FSDP's; "ep", or a
        borrowing dimension's `leaves`, of the processes it regroups)."""
        for dim in BORROWING:
            if dim.name in names or dim.leaves in names:
                return self.regrouped(dim.name)[names if len(names) > 1 else names[0]]
        return self.mesh[names if len(names) > 1 else names[0]]

    def _flattened(self, names: list[str]) -> str:
        """The name of these dimensions as one of the mesh (flattened where several)."""
        if len(names) == 1:
            return names[0]
        self.submesh(*names)._flatten("_".join(names))
        return "_".join(names)

    def regrouped(self, name: str):
        """A borrowing dimension's mesh: (the replicas, what it leaves, itself) — the
        processes it borrows flattened and cut into groups of its degree, neighbours innermost."""
        if name not in self._regrouped:
            from torch.distributed.device_mesh import DeviceMesh

            dim = BY_NAME[name]
            # The lenders as one dimension (the flattened mesh itself: torch warns that slicing
            # a flattened dimension's name from the root will go), beside the replicas.
            lenders = self.submesh(*dim.borrows)
            lenders = lenders._flatten("_".join(dim.borrows)) if len(dim.borrows) > 1 else lenders
            replicas = [d.name for d in GRID if d.replicates]
            base = DeviceMesh._concatenate([self.submesh(*replicas), lenders])
            degree = self.dims[name]
            self._regrouped[name] = base._unflatten(len(replicas), (self.dims.lent(name) // degree, degree),
                                                    (dim.leaves, name))
        return self._regrouped[name]

    def data_parallel_mesh(self, within: Optional[str] = None):
        """FSDP's mesh: (replicas, shards) where there are replicas (HSDP), the shards alone
        otherwise; the shards are every dimension FSDP shards over, flattened into one where
        several are in use. `within` a borrowing dimension: the mesh of what it leaves, for
        the parameters it split (expert parallel's experts, FSDP-sharded over the processes
        that hold the same ones)."""
        replicas = [d.name for d in GRID if d.replicates and self.dims[d.name] > 1]
        if within is not None:
            return self.submesh(*replicas, BY_NAME[within].leaves)
        shard_dims = [d.name for d in GRID if d.shards_state]
        used = [name for name in shard_dims if self.dims[name] > 1] or shard_dims[:1]
        return self.submesh(*replicas, self._flattened(used))

    def group(self, name: str) -> Optional[dist.ProcessGroup]:
        """The process group of one dimension: this process and its peers along it (None:
        the dimension spans the whole world, whose default group then serves)."""
        if getattr(self.dims, name) == self.ctx.world_size:
            return None
        return self.submesh(name).get_group()

    def describe(self) -> dict:
        return {"parallel_dims": self.dims.as_dict(), "mesh": self.dims.describe()}
