"""The tokens each expert of a mixture of experts receives: the load balance, the first thing
to look at when training one.

Every experts module (experts.py) is called with the router's choices, `top_k_index` (tokens,
top-k); a hook counts them per expert on the device as training's forward passes them (not in
evaluation, and not again when activation checkpointing computes a block a second time in
backward), with no host synchronisation. `sync`, called by every process at the same step,
sums the counts since the previous sync over the processes that routed different tokens —
every data-parallel and context-parallel process; tensor-parallel peers route the same tokens
and count once — in one small all-reduce: the counts of the global batch.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from .experts import expert_count, expert_modules


def _top_k_index(args: tuple, kwargs: dict) -> Optional[torch.Tensor]:
    found = kwargs.get("top_k_index", args[1] if len(args) > 1 else None)
    return found if isinstance(found, torch.Tensor) else None


class ExpertLoad:
    """Counts of the (token, choice) pairs each expert received, per mixture-of-experts layer."""

    def __init__(self, model: nn.Module, device: torch.device, same_tokens: int = 1):
        """`same_tokens`: how many processes route each token (tensor-parallel peers: tp)."""
        self.layers = expert_modules(model)
        self.experts = max((expert_count(m) for m in self.layers.values()), default=0)
        self.same_tokens = same_tokens
        self.pending = torch.zeros(len(self.layers), self.experts, dtype=torch.float64, device=device)
        self.pending_steps = 0
        self.total = torch.zeros_like(self.pending, device="cpu")
        self.total_steps = 0
        self.last: Optional[list] = None
        self.last_steps = 0
        self.hooks = [module.register_forward_pre_hook(self._counter(index), with_kwargs=True)
                      for index, module in enumerate(self.layers.values())]

    def __bool__(self) -> bool:
        return bool(self.layers)

    def _counter(self, index: int):
        def count(module: nn.Module, args: tuple, kwargs: dict) -> None:
            chosen = _top_k_index(args, kwargs)
            if chosen is None or not module.training or torch._C._current_graph_task_id() != -1:
                return  # evaluation, or a checkpointed block computed again during backward
            counts = torch.bincount(chosen.reshape(-1), minlength=self.experts)[:self.experts]
            self.pending[index] += counts.to(self.pending.device, self.pending.dtype)
        return count

    def close(self) -> None:
        """Stops counting (the hooks removed)."""
        for hook in self.hooks:
            hook.remove()

    def step_done(self) -> None:
        self.pending_steps += 1

    def sync(self) -> None:
        """Collective (every process at the same step): the global counts since the last sync."""
        counts = self.pending.clone()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(counts)
        counts = counts.cpu() / self.same_tokens
        self.pending.zero_()
        if self.pending_steps:
            self.total += counts
            self.total_steps += self.pending_steps
            self.last = (counts / self.pending_steps).tolist()
            self.last_steps = self.pending_steps
        self.pending_steps = 0

    def record(self) -> dict:
        """The step record's fields: each layer's tokens per expert per step, over the steps
        since the previous sync; the worst layer's largest expert over its mean."""
        if self.last is None:
            return {}
        return {"expert_tokens": [[_compact(v) for v in layer] for layer in self.last],
                "expert_tokens_steps": self.last_steps, "expert_load_max_over_mean": max_over_mean(self.last)}

    def summary(self) -> dict:
        """summary.json's: every layer's tokens per expert over the run, and its balance."""
        if not self.total_steps:
            return {}
        totals = self.total.tolist()
        return {"expert_layers": list(self.layers), "expert_tokens_total": [[_compact(v) for v in layer]
                                                                            for layer in totals],
                "expert_tokens_per_step": [[_compact(v / self.total_steps) for v in layer] for layer in totals],
                "expert_load_max_over_mean": max_over_mean(totals),
                "expert_load_by_layer": [max_over_mean([layer]) for layer in totals]}


def max_over_mean(layers: list) -> float:
    """The largest expert's tokens over the mean expert's, in the worst layer (1: balanced)."""
    ratios = [max(layer) / (sum(layer) / len(layer)) for layer in layers if layer and sum(layer)]
    return round(max(ratios), 4) if ratios else 1.0


def _compact(value: float):
    """A whole count as an integer (JSON without '.0'), a mean to a tenth."""
    return int(value) if float(value).is_integer() else round(value, 1)
