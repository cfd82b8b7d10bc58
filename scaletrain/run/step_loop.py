"""The step loop's calls, as methods of `Run`: `train_step`, and the four calls it is made of
for a hand-written loop — `accumulate` (no gradient synchronisation on accumulation
micro-steps), `backward` (÷ grad_accum, × the fp16 loss scale), `clip_grad_norm` (the whole
model's norm, across shards and stages) and `step` (the optimizer on a cycle's last
micro-step; the step counter checkpoints and hang reports use)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch
from torch import nn

from ..data.batches import NO_TARGETS
from ..foundation.errors import UsageError


class RunStepLoop:
    """Mixed into Run: uses its `prepared`, `strategy`, `scaler`, `watch`, `_micro_step`,
    `steps_taken`, `collector` and `_watchdog`."""

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, batch: Any, targets: Any = NO_TARGETS,
                   loss_fn: Optional[Callable] = None, *, scheduler: Any = None,
                   max_grad_norm: Optional[float] = None) -> torch.Tensor:
        """zero_grad, forward, backward (gradients synchronised), clipping, optimizer step,
        for one batch: `(inputs, targets)` (or `inputs, targets` as two arguments), a mapping
        passed as `model(**batch)`, or a tensor. The loss is `loss_fn(output, ...)` when
        given, else the model's own (`output.loss`). Returns the loss as a detached tensor:
        no host synchronisation in the hot loop. `scheduler` steps after the optimizer;
        `max_grad_norm` clips the gradients' norm first (see `clip_grad_norm`).

        With `grad_accum=N` a call is one micro-step: the optimizer steps on every N-th call,
        the N-1 before it accumulate gradients without synchronising them (each loss scaled
        by 1/N), so N calls on batches of B equal one step on a batch of N*B.

        It is `accumulate`, `backward`, `clip_grad_norm` and `step`, the calls a
        hand-written loop uses; the forward and backward are the strategy's (a pipeline
        runs them on its schedule)."""
        with self.watch("train step"):
            if self._micro_step == 0:
                optimizer.zero_grad(set_to_none=True)
            with self.accumulate(model):
                scale = self.scaler.factor() / self.strategy.grad_accum
                loss = self.prepared(model).forward_backward(batch, targets, loss_fn, scale=scale)
            if max_grad_norm is not None:
                self.clip_grad_norm(model, max_grad_norm)
            self.step(optimizer, scheduler)
        return loss

    # -- the calls of a hand-written loop -----------------------------------------------
    def accumulate(self, model: nn.Module):
        """Context around a micro-step's forward and backward: gradients are not
        synchronised inside it, except on the last micro-step of an accumulation cycle
        (`grad_accum=N`), whose backward synchronises everything accumulated. Entering it
        on a cycle's first micro-step clears the gradients the previous step left (they stay
        readable until then)."""
        prepared = self.prepared(model)
        if self._micro_step == 0:
            for parameter in prepared.model.parameters():
                parameter.grad = None
        if self.stepping:
            return contextlib.nullcontext()
        return prepared.no_sync()

    @property
    def stepping(self) -> bool:
        """True on the micro-step after which the optimizer steps (always, without accumulation)."""
        return self._micro_step == self.strategy.grad_accum - 1

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), with the loss divided by the accumulation's micro-steps and, for
        fp16, multiplied by the gradient scaler's factor. Under pipeline, forward and
        backward run on the strategy's schedule: use `train_step` or `forward_backward`."""
        self.scaler.scale(loss / self.strategy.grad_accum).backward()

    def clip_grad_norm(self, model: nn.Module, max_norm: float, norm_type: float = 2.0) -> Optional[torch.Tensor]:
        """Scales the gradients of `model` down so that their norm — the whole model's, as one
        process would compute it: across FSDP's shards and a pipeline's stages — is at most
        `max_norm`. Returns that norm (before clipping), or None on an accumulation
        micro-step, where the gradient is not complete and nothing is done. With fp16 the
        gradients are unscaled first."""
        if not self.stepping:
            return None
        prepared = self.prepared(model)
        if prepared.optimizer is not None:
            self.scaler.unscale(prepared.optimizer)
        elif self.scaler.enabled:
            raise UsageError("clip_grad_norm under fp16 needs the optimizer: give it to run.setup(model, optimizer)")
        parameters = [p for p in prepared.model.parameters() if p.grad is not None]
        norm = prepared.grad_norm(parameters, norm_type)
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, norm)
        return norm

    def step(self, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> bool:
        """Ends a micro-step: on the last one of an accumulation cycle (every one, without
        accumulation) the optimizer steps (fp16: through the gradient scaler, which skips a
        step whose gradients overflowed) and `scheduler` steps. Counts the step for
        checkpoints and hang reports. Returns True when it stepped."""
        stepped = self.stepping
        if stepped:
            self.scaler.step(optimizer)
            self.scaler.update()
            if scheduler is not None:
                scheduler.step()
        self._micro_step = (self._micro_step + 1) % self.strategy.grad_accum
        self.steps_taken += 1
        self.collector.step(self.steps_taken)
        if self._watchdog is not None:
            self._watchdog.step = self.steps_taken
        return stepped

    def resume_at(self, steps_taken: int) -> None:
        """Continue counting from `steps_taken` (a checkpoint loaded: its step)."""
        self.steps_taken = steps_taken

    def forward_backward(self, model: nn.Module, batch: Any, targets: Any = NO_TARGETS,
                         loss_fn: Optional[Callable] = None, scale: float = 1.0) -> torch.Tensor:
        """Forward and backward only (gradients synchronised unless inside `no_sync`): the
        middle of `train_step`, for loops that time or accumulate the parts themselves."""
        return self.prepared(model).forward_backward(batch, targets, loss_fn, scale)

    def no_sync(self, model: nn.Module):
        """Context for gradient accumulation: backward inside it does not communicate;
        the first backward outside it synchronises everything accumulated."""
        return self.prepared(model).no_sync()

    def accumulation_position(self) -> tuple[int, int]:
        """(micro-steps done in the current accumulation cycle, micro-steps per optimizer step)."""
        return self._micro_step, self.strategy.grad_accum

