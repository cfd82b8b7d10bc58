"""What a strategy is: everything that happens inside one process to spread training.

A strategy wraps the model and optimizer, says how the data is sharded, runs a training
step, predicts for evaluation and describes itself for the run's summary. The registry in
`scaletrain.strategies` maps names to strategies; nothing else switches on a name.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Optional

import torch
from torch import nn

from ..errors import UsageError

if TYPE_CHECKING:
    from ..api import Run


class Strategy:
    name = "base"
    help = ""
    #: False for strategies that must run as exactly one process (single, dp, mp).
    multi_process = True

    def __init__(self, **options):
        self.options = options

    def check_world_size(self, world_size: int) -> None:
        """Raise UsageError when this strategy cannot run on `world_size` processes."""
        if not self.multi_process and world_size > 1:
            raise UsageError(f"strategy {self.name!r} runs one process, but {world_size} were asked for; "
                             "use --nproc-per-node 1, or --strategy ddp for one process per device")

    def validate(self, run: "Run") -> None:
        """Raise UsageError for a combination that cannot work (before any model exists)."""
        self.check_world_size(run.world_size)

    def data_parallel(self, run: "Run") -> tuple[int, int]:
        """(this process's data shard, number of shards). Data parallel: one shard per rank."""
        return run.rank, run.world_size

    def setup(self, run: "Run", model: nn.Module, optimizer: Optional[torch.optim.Optimizer]):
        model.to(run.device)
        return model, optimizer

    def forward_backward(self, run: "Run", model: nn.Module, inputs, targets, loss_fn: Callable,
                         scale: float = 1.0) -> torch.Tensor:
        """Forward and backward on one batch; returns the detached, unscaled loss."""
        loss = loss_fn(model(inputs), targets)
        (loss * scale if scale != 1.0 else loss).backward()
        return loss.detach()

    def no_sync(self, model: nn.Module):
        """Context in which backward does not synchronise gradients (accumulation)."""
        return contextlib.nullcontext()

    def predict(self, run: "Run", model: nn.Module, inputs) -> Optional[torch.Tensor]:
        """Logits for evaluation, or None on a process that does not produce outputs."""
        return self.unwrap(model)(inputs)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)

    def describe(self, run: "Run") -> dict:
        """Strategy-specific facts for summary.json."""
        return {}
