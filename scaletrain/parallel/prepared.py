"""A model prepared for one run, and the calls that use it: a forward and backward, skipping
gradient synchronisation, the gradient's norm, prediction, what the process holds, and the
model's and optimizer's state for checkpoints — the same class whatever composition made it.

`model` is what `run.setup` hands back (possibly a wrapper), `module` the user's own module
(or, for a pipeline, this process's stage of it): checkpoints and `run.unwrap` use `module`,
so parameter names are the user's own whatever the wrapper.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch

from ..data.batches import NO_TARGETS, call_model, compute_loss, move_to, split
from ..data.lm_loss import chunking
from . import model_state, state
from .config import ParallelConfig
from .grad_norm import total_norm
from .part import ModelPart
from .precision import PRECISIONS
from .topology import Topology


class Prepared:
    def __init__(self, config: ParallelConfig, topology: Topology, part: ModelPart,
                 optimizer: Optional[torch.optim.Optimizer]):
        self.config, self.part = config, part
        self.topology = topology
        self.ctx = topology.ctx
        self.model = part.returned if part.returned is not None else part.model
        self.module, self.optimizer = part.module, optimizer
        self.banner = list(part.banner)
        self.runner = part.runner

    @property
    def precision(self) -> str:
        return self.config.option("precision", "fp32")

    def autocast(self):
        """Mixed precision: bf16/fp16 autocast around forward and loss; nothing for fp32, nor
        where the model casts by itself (FSDP's mixed-precision policy)."""
        dtype = PRECISIONS[self.precision]
        if dtype is None or self.part.casts_itself:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=dtype)

    # -- training ---------------------------------------------------------------------------
    def forward_backward(self, batch: Any, targets: Any = NO_TARGETS, loss_fn: Optional[Callable] = None,
                         scale: float = 1.0) -> torch.Tensor:
        """Forward and backward on one batch; returns the detached, unscaled loss. The batch
        goes to this process's device first, whatever the strategy (DDP and FSDP would move
        it by themselves, a plain module or a pipeline stage would not). The model's output
        (a language model's logits: gigabytes) is let go before backward; a language model's
        loss is chunked where `chunked_loss` is on (data/lm_loss.py)."""
        batch, targets = self.on_device(batch), self.on_device(targets)
        with chunking(self.config.option("chunked_loss", True)):
            if getattr(self.runner, "forward_backward", None) is not None:
                return self.runner.forward_backward(batch, targets, loss_fn, scale, autocast=self.autocast)
            inputs, rest = split(batch, targets)
            with self.autocast():
                output = call_model(self.part.model, inputs)
                loss = compute_loss(output, rest, loss_fn, inputs)
            del output  # what backward needs of it, autograd holds; the rest is freed now
            (loss if isinstance(scale, float) and scale == 1.0 else loss * scale).backward()
        return loss.detach()

    def on_device(self, batch: Any) -> Any:
        return batch if batch is NO_TARGETS else move_to(batch, self.ctx.device)

    def grad_norm(self, parameters: list, norm_type: float = 2.0) -> torch.Tensor:
        """The norm of the whole model's gradient, from this process's `parameters`."""
        return total_norm([p.grad for p in parameters if p.grad is not None], self.topology, norm_type)

    def no_sync(self):
        """Context in which backward does not synchronise gradients (accumulation)."""
        return self.part.no_sync()

    def predict(self, inputs: Any) -> Any:
        """The model's output for evaluation, or None on a process that does not produce one."""
        inputs = self.on_device(inputs)
        if self.runner is not None:
            return self.runner.predict(inputs, autocast=self.autocast)
        with self.autocast():
            return call_model(self.module, inputs)

    # -- reporting --------------------------------------------------------------------------
    def describe(self) -> dict:
        """Facts about what this run holds, for summary.json. Collective: every rank calls it."""
        return {"memory_per_process": model_state.gather_memory(self.ctx, self.module, self.optimizer),
                **self.part.facts}

    # -- state for checkpoints ----------------------------------------------------------------
    def state_dict(self, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> dict:
        """{"model": ..., "optimizer": ...}, keyed by the user's parameter names.
        full=True: collective; rank 0 gets the whole state on the CPU, the others {}.
        full=False: this process's shares (DTensors where sharded), for a sharded save."""
        return state.state_dict(self.module, self.topology, full, optimizer)

    def load_state_dict(self, state_: dict, full: bool, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        """Puts a state from `state_dict(full)` back. full=True: collective; rank 0 passes
        the whole state, the others `{"model": {}, "optimizer": {}}`."""
        state.load_state_dict(self.module, self.topology, state_, full, optimizer)
