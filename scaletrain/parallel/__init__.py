"""Parallelisms that compose on one device mesh.

A run's topology (`Topology`: the degrees pp × dp_replicate × dp_shard × tp and one
DeviceMesh) is owned by the run; the parallelisms are transforms applied to the model, in
this fixed order, each where the configuration enables it:

1. pipeline        cut the model into stages of consecutive units; this process keeps its
                   own, and everything below applies to that stage alone
2. local_devices   the classic single-process split over this process's devices (mp,
                   hybrid) or DataParallel's replicas (dp)
3. tensor_parallel split each layer's matrices across the "tp" dimension
4. compile         torch.compile block by block, in place
5. data_parallel   DDP over "dp_replicate", or FSDP2 over ("dp_replicate", "dp_shard")

Tensor parallel comes before FSDP because FSDP shards what tensor parallel has already
split (2-D parameters), and compilation before the data-parallel wrappers so that their
communication stays between the compiled blocks. A combination is a configuration — the
degrees and options a strategy preset fills in — not a class.

Adding a parallelism is one module defining an object with `name`, `enabled(config)` and
`apply(part, config)` (see part.py), and one line in PARALLELISMS.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .compile import Compile
from .data_parallel import DataParallel
from .local_devices import LocalDevices
from .model_state import retarget_optimizer
from .part import ModelPart, ParallelConfig
from .pipeline import PipelineCut
from .prepared import Prepared
from .tensor_parallel import TensorParallel, check_tensor_parallel, declared_plan
from .topology import Topology

#: The parallelisms, in the order they are applied.
PARALLELISMS = [
    PipelineCut(),
    LocalDevices(),
    TensorParallel(),
    Compile(),
    DataParallel(),
]


def parallelize(config: ParallelConfig, model: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> Prepared:
    """Applies every enabled parallelism to `model`, in order; points the optimizer (the
    user's own object, changed in place) at the parameters this process trains."""
    before = dict(model.named_parameters())
    if config.topology.dims.tp > 1 and config.option("parallelize") is None:
        check_tensor_parallel(model, config.topology.dims.tp, None)
        config.tp_rules = declared_plan(model)  # read from the whole model, before any cut
    if not config.pipeline and config.local_devices != "split":
        model.to(config.topology.ctx.device)  # a stage, or parts on several devices, are placed by their cut
    part = ModelPart(module=model, model=model)
    for parallelism in PARALLELISMS:
        if parallelism.enabled(config):
            parallelism.apply(part, config)
    # Parallelisms replace parameters (FSDP's shards, tensor parallel's DTensors) or keep a
    # share of them (a stage): the optimizer must follow.
    optimizer = retarget_optimizer(optimizer, before, part.module)
    return Prepared(config, part, optimizer)


__all__ = ["PARALLELISMS", "ParallelConfig", "ModelPart", "Prepared", "Topology", "parallelize"]
