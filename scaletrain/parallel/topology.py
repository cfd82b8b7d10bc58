"""The one owner of a run's topology: its parallel dimensions, its device mesh, and the
answers every other part asks of them — this process's data-parallel rank and size, the
group of each dimension, who holds the model's outputs, whether gradients and state are
sharded.

Strategies, loaders, the loss scaler, evaluation and checkpoints all ask a `Topology`; none
of them builds a mesh or a process group of its own. The mesh has the five dimensions of
`ParallelDims` (those of size 1 included, so every dimension can be named) and is built on
first use: a plain DDP run never needs one.
"""

from __future__ import annotations

from typing import Optional

import torch.distributed as dist

from ..context import ProcessContext
from .dims import MESH_DIMS, ParallelDims


class Topology:
    def __init__(self, dims: ParallelDims, ctx: ProcessContext):
        self.dims, self.ctx = dims, ctx
        self.coords = dims.coordinates(ctx.rank)
        self._mesh = None
        self._flat: dict = {}

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
        return self.coords["pp"]

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
        shard (tensor- and context-parallel peers see the same losses and evaluate the same
        batches; a pipeline's first stages none)."""
        return self.holds_outputs and self.coords["tp"] == 0 and self.coords["cp"] == 0

    @property
    def output_reporters(self) -> int:
        """How many processes report outputs: metrics are averaged over them."""
        return self.dp_size

    @property
    def gradients_differ(self) -> bool:
        """Whether processes hold different gradients after synchronisation (shards, tensor
        parallel slices, pipeline stages): a gradient norm or an fp16 overflow must then be
        agreed over every process."""
        return self.dims.dp_shard > 1 or self.dims.cp > 1 or self.dims.tp > 1 or self.dims.pp > 1

    @property
    def shards_state(self) -> bool:
        """Whether no process holds the whole model (large ones are checkpointed sharded)."""
        return self.gradients_differ

    # -- the mesh and its groups -------------------------------------------------------
    @property
    def mesh(self):
        """The DeviceMesh over every process, dimensions named as in MESH_DIMS (built once)."""
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            shape = tuple(getattr(self.dims, name) for name in MESH_DIMS)
            self._mesh = init_device_mesh(self.ctx.device.type, shape, mesh_dim_names=MESH_DIMS)
        return self._mesh

    def submesh(self, *names: str):
        """The mesh of some dimensions (e.g. "dp_replicate", "dp_shard" for HSDP's)."""
        return self.mesh[names if len(names) > 1 else names[0]]

    def flat(self, *names: str):
        """One dimension made of several neighbouring ones (e.g. "dp_shard", "cp": the
        processes FSDP shards over when context-parallel peers hold the same weights), named
        by joining theirs; a single name is its own dimension. Built once."""
        if len(names) == 1:
            return self.submesh(names[0])
        name = "_".join(names)
        if name not in self._flat:
            self._flat[name] = self.submesh(*names)._flatten(name)
        return self._flat[name]

    def group(self, name: str) -> Optional[dist.ProcessGroup]:
        """The process group of one dimension: this process and its peers along it (None:
        the dimension spans the whole world, whose default group then serves)."""
        if getattr(self.dims, name) == self.ctx.world_size:
            return None
        return self.submesh(name).get_group()

    def describe(self) -> dict:
        return {"parallel_dims": self.dims.as_dict(), "mesh": self.dims.describe()}
