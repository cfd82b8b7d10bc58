"""Which communication backends this torch build can use, and which one a run gets.

NCCL for CUDA devices, Gloo for CPUs (and as the fallback); MPI only when torch was built
with it; oneCCL only when its bindings import.
"""

from __future__ import annotations

import importlib.util

import torch
import torch.distributed as dist

from ..foundation.errors import UsageError
from ..foundation.text_values import AUTO

KNOWN_BACKENDS = ("gloo", "nccl", "mpi", "ccl")


def available_backends() -> dict[str, str]:
    """{backend: why it is (not) usable here}; usable ones start with 'yes'."""
    found = {}
    found["gloo"] = "yes" if dist.is_gloo_available() else "no: torch built without Gloo"
    if not dist.is_nccl_available():
        found["nccl"] = "no: torch built without NCCL (CPU build)"
    elif not torch.cuda.is_available():
        found["nccl"] = "no: no CUDA device visible"
    else:
        found["nccl"] = "yes"
    found["mpi"] = "yes" if dist.is_mpi_available() else "no: torch built without MPI"
    has_ccl = any(importlib.util.find_spec(m) is not None for m in ("oneccl_bindings_for_pytorch", "torch_ccl"))
    found["ccl"] = "yes" if has_ccl else "no: oneccl_bindings_for_pytorch not installed"
    return found


def usable_backends() -> list[str]:
    return [name for name, why in available_backends().items() if why == "yes"]


def choose_backend(requested: str | None, device_type: str) -> str:
    """The backend to use: the requested one if usable, else the device's natural one."""
    if requested in (None, "", AUTO):
        return "nccl" if device_type == "cuda" else "gloo"
    if requested not in KNOWN_BACKENDS:
        raise UsageError(f"unknown backend {requested!r}; choose one of: {', '.join(KNOWN_BACKENDS)} (or leave --backend out)")
    why = available_backends()[requested]
    if why != "yes":
        usable = ", ".join(usable_backends()) or "none"
        raise UsageError(f"backend {requested!r} is not usable here ({why[4:]}); available: {usable}. "
                         f"Use --backend {usable_backends()[0] if usable_backends() else 'gloo'} or leave --backend out")
    if requested == "nccl" and device_type != "cuda":
        raise UsageError("backend 'nccl' needs CUDA devices but this run is on the CPU; use --backend gloo")
    return requested
