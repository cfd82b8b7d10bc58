"""What a process holds of the model (parameters, gradients, optimizer state) and how to
point an optimizer at parameters that a strategy replaced or dropped."""

from __future__ import annotations

from typing import Iterable, Optional

import torch
from torch import nn


def _local(t: torch.Tensor) -> torch.Tensor:
    """The part of a (possibly sharded DTensor) tensor that lives in this process."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen, total = set(), 0
    for t in tensors:
        local = _local(t)
        key = (local.device, local.data_ptr(), local.numel())
        if local.numel() and key not in seen:  # tensors that share memory count once
            seen.add(key)
            total += local.numel() * local.element_size()
    return total


def memory_report(model: nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> dict:
    """Bytes this process holds for parameters, gradients and optimizer state."""
    params = list(model.parameters())
    state = []
    if optimizer is not None:
        for entry in optimizer.state.values():
            state.extend(v for v in entry.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    report = {"parameters_bytes": _bytes(params),
              "gradients_bytes": _bytes(p.grad for p in params if p.grad is not None),
              "optimizer_state_bytes": _bytes(state)}
    report["total_bytes"] = sum(report.values())
    return report


def rebuild_optimizer(optimizer: Optional[torch.optim.Optimizer], before: dict[str, nn.Parameter],
                      after: nn.Module) -> Optional[torch.optim.Optimizer]:
    """A fresh optimizer of the same class and settings over `after`'s parameters.

    `before` maps the names of the parameters the optimizer was built on; parameters that
    `after` no longer has (another pipeline stage's) are dropped, parameters it replaced
    (FSDP's sharded ones) are swapped in. The optimizer must not have stepped yet."""
    if optimizer is None:
        return None
    if optimizer.state:
        raise ValueError("call run.setup(model, optimizer) before the optimizer's first step")
    name_of = {id(p): name for name, p in before.items()}
    now = dict(after.named_parameters())
    groups = []
    for group in optimizer.param_groups:
        params = [now[name_of[id(p)]] for p in group["params"] if name_of.get(id(p)) in now]
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    groups = [g for g in groups if g["params"]]
    return type(optimizer)(groups, **optimizer.defaults)
