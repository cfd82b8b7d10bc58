"""Parallelisms that compose on one device mesh.

A run's topology (`Topology`: the degrees of the mesh's dimensions, `dims.MESH`, and one
DeviceMesh) is owned by the run; the parallelisms are transforms applied to the model, in
this fixed order, each where the configuration (`ParallelConfig`) enables it:

   fused_norms     hand-written RMSNorm modules of known forms computed by torch's fused
                   rms_norm (the same maths), before anything wraps the blocks
1. pipeline        cut the model into stages of consecutive units; this process keeps its
                   own, and everything below applies to that stage alone
2. local_devices   the classic single-process split over this process's devices (mp, and
                   each replica of DDP + model parallel) or DataParallel's replicas (dp)
   float8          precision float8: linear layers become torchao's Float8Linear (before
                   everything that wraps or shards them)
3. tensor_parallel split each layer's matrices across the "tp" dimension
4. context_parallel split each sequence across the "cp" dimension, attention round a ring
   expert_parallel  split a mixture of experts' experts across the "ep" dimension (borrowed
                   from dp_shard × cp), tokens sent to them and back by all-to-all
5. activation_checkpointing  keep only each block's input for backward, recompute the rest
6. compile         torch.compile block by block, in place
   chunked_loss    a Hugging Face causal LM's own loss taken from its logits a chunk of
                   tokens at a time (hooks on the model itself, under any wrapper)
7. data_parallel   DDP over "dp_replicate", or FSDP2 over ("dp_replicate", "dp_shard" × "cp"):
                   sharded, hybrid-sharded (HSDP) or replicated by FSDP's means

Tensor parallel comes before FSDP because FSDP shards what tensor parallel has already
split (2-D parameters); context parallel routes each block's attention (of tensor parallel's
heads, where split) before checkpointing and compilation take the blocks, so that a block
computed again in backward goes round the ring again; checkpointing wraps a block's whole computation, tensor parallel's
collectives included, and is itself compiled; compilation comes before the data-parallel
wrappers so that their communication stays between the compiled blocks. A combination is a configuration — the
degrees and options a strategy preset fills in — not a class.

Adding a parallelism is one module defining an object with `name`, `enabled(config)` and
`apply(part, config, topology)` (see part.py), its cost terms in `scaletrain/plan/costs/`
(a module of the same name), and one line in PARALLELISMS; docs/architecture.md lists every
file it touches.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from ..foundation.errors import UsageError

from .checkpointing import ActivationCheckpointing
from .compile import Compile
from .config import SPLIT, ParallelConfig
from .context_parallel import ContextParallel
from .data_parallel import DataParallel
from .expert_parallel import ExpertParallel
from .float8 import Float8Training
from .fused_norms import FusedNorms
from .lm_loss import ChunkedLoss
from .local_devices import LocalDevices
from .meta_init import is_meta, materialise
from .model_state import retarget_optimizer
from .part import ModelPart
from .pipeline import PipelineCut
from .prepared import Prepared
from .tensor_parallel import TensorParallel, check_tensor_parallel, declared_plan
from .topology import Topology

#: The parallelisms, in the order they are applied.
PARALLELISMS = [
    FusedNorms(),
    PipelineCut(),
    LocalDevices(),
    Float8Training(),
    TensorParallel(),
    ContextParallel(),
    ExpertParallel(),
    ActivationCheckpointing(),
    Compile(),
    ChunkedLoss(),
    DataParallel(),
]


def parallelize(config: ParallelConfig, topology: Topology, model: nn.Module,
                optimizer: Optional[torch.optim.Optimizer], meta_rng: Optional[torch.Tensor] = None,
                init_fn: Optional[Callable] = None) -> Prepared:
    """Applies every enabled parallelism to `model`, in order; points the optimizer (the
    user's own object, changed in place) at the parameters this process trains.

    A model built on the meta device is parallelised there, then materialised as this
    process's share and initialised by its own code (meta_init.py) as an ordinary build from
    the random state `meta_rng` would be (`init_fn(module)`: your initialisation instead)."""
    before = dict(model.named_parameters())
    on_meta = is_meta(model)
    if on_meta and config.local_devices is not None:
        raise UsageError(f"strategy {config.strategy!r} splits a model over this process's devices, which needs the "
                         "whole model built: build it on a real device (not the meta device)")
    part = ModelPart(module=model, model=model)
    if config.dims.tp > 1 and config.option("parallelize") is None:
        check_tensor_parallel(model, config.dims.tp, None)
        part.tp_rules = declared_plan(model)  # read from the whole model, before any cut
    if not (config.pipelined or config.local_devices == SPLIT or on_meta):
        model.to(topology.ctx.device)  # a stage, or parts on several devices, are placed by their cut
    for parallelism in PARALLELISMS:
        if parallelism.enabled(config):
            # A parallelism that reads the weights as it applies (DDP checks and broadcasts
            # them) gets them materialised first; the others work on the meta device's shapes.
            if on_meta and getattr(parallelism, "needs_values", lambda _config: False)(config):
                materialise(model, part.module, topology.ctx.device, meta_rng, init_fn)
                part.banner.append("meta-device initialisation: each process initialised the whole model")
                on_meta = False
            parallelism.apply(part, config, topology)
    if on_meta:
        materialise(model, part.module, topology.ctx.device, meta_rng, init_fn)
        part.banner.append("meta-device initialisation: each process built and initialised only its own share")
    # Parallelisms replace parameters (FSDP's shards, tensor parallel's DTensors) or keep a
    # share of them (a stage): the optimizer must follow.
    optimizer = retarget_optimizer(optimizer, before, part.module)
    for call in part.after_optimizer_step if optimizer is not None else ():
        optimizer.register_step_post_hook(call)
    return Prepared(config, topology, part, optimizer)


__all__ = ["PARALLELISMS", "ParallelConfig", "ModelPart", "Prepared", "Topology", "parallelize"]
