"""What a checkpointer asks of the run it serves and of a prepared model, as protocols: the
library's `Run` is a `Host`, a strategy's prepared model a `StateOwner`. The checkpointer
knows nothing else of either."""

from __future__ import annotations

from typing import Any, ContextManager, Optional, Protocol

import torch
from torch import nn

from ..process.process_context import ProcessContext


class StateOwner(Protocol):
    """What holds a model's state: a strategy's prepared model (or a plain module's)."""

    module: nn.Module

    def state_dict(self, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> dict: ...

    def load_state_dict(self, state: dict, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> None: ...


class Host(Protocol):
    """What a checkpointer needs from the run it serves (the library's Run provides it)."""

    ctx: ProcessContext
    topology: Any  # parallel.Topology: whether the processes hold shards of the model
    steps_taken: int
    scaler: Any  # precision.LossScaler: fp16's loss scale is part of the training state
    background_saves: Any  # background.BackgroundSaves: the run's one checkpoint written in the background

    def print(self, *args, **kwargs) -> None: ...

    def state_owner(self, model: nn.Module) -> StateOwner: ...

    def watch(self, name: str) -> ContextManager: ...

    def checkpoint_facts(self) -> dict: ...

    def accumulation_position(self) -> tuple[int, int]: ...

    def resume_at(self, steps_taken: int) -> None: ...


