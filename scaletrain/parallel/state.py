"""A prepared model's state for checkpoints, under any composition, keyed by the user's own
parameter names.

- full: the whole model and optimizer on rank 0 (the others get {}). Without pipeline
  stages torch's `get_state_dict` gathers FSDP's shards and tensor parallel's slices. With
  stages, each stage's first process (data-parallel and tensor-parallel coordinates 0)
  gathers its stage's DTensors whole, one tensor at a time, and rank 0 merges the stages'
  disjoint shares.
- local: this process's own share as it is (DTensors where sharded), for a sharded save.

Loading a full state deals each process the part it holds: rank 0 sends each stage the keys
it asks for, and each process cuts its own slices of every DTensor out of the whole tensor
(no communication); without stages torch's loader broadcasts and reshards.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch import nn

from ..foundation.errors import UsageError
from ..process.object_collectives import gather_to_rank0, scatter_from_rank0
from . import model_state
from .dims import PP
from .topology import Topology

#: DTensor warns when gathering a 2-D (FSDP × tensor parallel) tensor takes two all-gathers:
#: expected here, once per tensor of a checkpoint, and nothing a user can act on.
logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def _whole(value):
    full_tensor = getattr(value, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else value


def _stage_leader(topology: Topology) -> bool:
    """The first process of its stage: coordinate 0 along every dimension but the pipeline's."""
    return all(index == 0 for name, index in topology.coords.items() if name != PP)


def state_dict(module: nn.Module, topology: Topology, full: bool,
               optimizer: Optional[torch.optim.Optimizer] = None) -> dict:
    if not full or topology.stages == 1:
        return model_state.ModuleState(module).state_dict(full, optimizer)
    local = model_state.local_state(module, optimizer)
    leader = _stage_leader(topology)
    mine: dict = {"model": {}, "optimizer": {}}
    for part, values in local.items():
        for key, value in values.items():
            whole = _whole(value)  # collective over the tensor's mesh: every process of the stage
            if leader:
                mine[part][key] = whole.detach().cpu() if isinstance(whole, torch.Tensor) else whole
    shares = gather_to_rank0(mine if leader else None)
    if topology.ctx.rank != 0:
        return {}
    whole_state = {"model": {}, "optimizer": {}}
    for share in shares:
        if share is not None:
            whole_state["model"].update(share["model"])
            whole_state["optimizer"].update(share["optimizer"])
    return whole_state


def load_state_dict(module: nn.Module, topology: Topology, state: dict, full: bool,
                    optimizer: Optional[torch.optim.Optimizer] = None) -> None:
    if not full or topology.stages == 1:
        model_state.ModuleState(module).load_state_dict(state, full, optimizer)
        return
    template = model_state.local_state(module, optimizer)
    wanted = {"model": list(template["model"]), "optimizer": list(template["optimizer"]),
              "with_optimizer": state.get("optimizer") is not None}
    requests = gather_to_rank0(wanted)
    shares: list = [None] * topology.ctx.world_size
    if topology.ctx.rank == 0:
        shares = [_share_for(state, request) for request in requests]
    share = scatter_from_rank0(shares)
    if isinstance(share, str):  # rank 0 found keys missing: every rank raises the same error
        raise UsageError(share)
    local = {part: {key: _slice_like(template[part][key], value) if key in template[part] else value
                    for key, value in (share[part] or {}).items()}
             for part in ("model", "optimizer") if share.get(part) is not None}
    model_state.load_local_state(module, optimizer, {"model": local["model"], "optimizer": local.get("optimizer")})


def _slice_like(template, whole):
    """`whole` cut as `template` is: this process's slice of a DTensor, laid out like it."""
    mesh = getattr(template, "device_mesh", None)
    if mesh is None or not isinstance(whole, torch.Tensor):
        return whole.to(template.device) if isinstance(whole, torch.Tensor) and isinstance(template, torch.Tensor) else whole
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(whole.to(template.device, template.dtype), mesh, template.placements, src_data_rank=None)


def _share_for(whole: dict, request: dict):
    """The part of the whole state one stage asked for, or the error's text."""
    missing = [k for k in request["model"] if k not in whole["model"]]
    if missing:
        return (f"the checkpoint has no {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} for this pipeline "
                "stage: it holds another model")
    optimizer = whole.get("optimizer") if request["with_optimizer"] else None
    return {"model": {k: whole["model"][k] for k in request["model"]},
            "optimizer": None if optimizer is None else {k: optimizer[k] for k in request["optimizer"] if k in optimizer}}
