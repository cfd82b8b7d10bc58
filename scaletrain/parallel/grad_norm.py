"""The norm of the whole model's gradient — what one process training the whole model on the
global batch would compute — from the pieces a process holds under any composition.

A process's gradients may be plain tensors (the whole gradient, or replicated copies of it
under tensor parallel) and DTensors on one mesh or another (FSDP's shards on the
data-parallel mesh, tensor parallel's slices, both on a 2-D mesh). Each kind is normed
apart — a DTensor norm is partial over the dimensions it is sharded on, and `full_tensor()`
combines it there — and the parts combine as a sum of powers (a max for the infinity norm).
A pipeline's stages hold disjoint parts of the model: their norms combine over the
pipeline's group the same way.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .dims import PP
from .topology import Topology


def _kind(grad: torch.Tensor):
    mesh = getattr(grad, "device_mesh", None)
    return None if mesh is None else (id(mesh), tuple(map(str, grad.placements)))


def total_norm(grads: list[torch.Tensor], topology: Topology, norm_type: float = 2.0) -> torch.Tensor:
    device = topology.ctx.device
    groups: dict = {}
    for grad in grads:
        groups.setdefault(_kind(grad), []).append(grad)
    norms = []
    for kind, members in groups.items():
        norm = torch.nn.utils.get_total_norm(members, norm_type)
        if kind is not None:
            norm = norm.full_tensor()
        norms.append(norm.to(device, torch.float32))
    infinite = norm_type == float("inf")
    if not norms:
        total = torch.zeros((), device=device)
    elif infinite:
        total = torch.stack(norms).max()
    else:
        total = (torch.stack(norms) ** norm_type).sum()
    if topology.stages > 1:
        # Stages hold disjoint parts: combine over the pipeline (replicas hold the same).
        dist.all_reduce(total, op=dist.ReduceOp.MAX if infinite else dist.ReduceOp.SUM,
                        group=topology.group(PP))
    return total if infinite else total ** (1.0 / norm_type)
