"""Defaults a launch takes from the node it runs on, as torchrun does.

torchrun reads a default for each of its options from `PET_<OPTION>` (PET_NPROC_PER_NODE,
PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_RDZV_ENDPOINT, ...); the
Kubeflow training operator sets those in each pod. An older PyTorchJob (or any env://
set-up without LOCAL_RANK) sets only RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, one
process per pod: then the pod is node RANK of WORLD_SIZE. In both cases `scaletrain launch
--nproc-per-node N` in the pod starts this node's N ranks with the right global ranks.
Flags given on the command line always win.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Optional

from ..process.environment import detect
from .request import LaunchRequest


def _pet_int(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(f"PET_{name}", "")
    return int(value) if value.isdigit() else None  # "auto" or an elastic range "1:4": not ours to read


def node_defaults(req: LaunchRequest) -> LaunchRequest:
    environ = req.environ
    pet = {name: _pet_int(environ, name) for name in ("NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_PORT")}
    req = replace(
        req,
        nproc_per_node=req.nproc_per_node or pet["NPROC_PER_NODE"],
        nnodes=req.nnodes or pet["NNODES"],
        node_rank=req.node_rank if req.node_rank is not None else pet["NODE_RANK"],
        master_addr=req.master_addr or environ.get("PET_MASTER_ADDR") or None,
        master_port=req.master_port or pet["MASTER_PORT"],
        rdzv_endpoint=req.rdzv_endpoint or environ.get("PET_RDZV_ENDPOINT") or None,
    )
    here = detect(environ)
    if not here.per_node:
        return req
    return replace(req, nnodes=req.nnodes or here.nnodes,
                   node_rank=here.node_rank if req.node_rank is None else req.node_rank,
                   master_addr=req.master_addr or here.master_addr,
                   master_port=req.master_port or here.master_port)
