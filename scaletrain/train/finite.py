"""Noticing that training went non-finite (a loss, a gradient or a weight is NaN or inf),
without a host synchronisation on every step.

Every step adds one comparison on the device: the step of the first non-finite loss this
process saw stays a tensor. Every `every` steps (the logging interval), before every
checkpoint and at the end of every epoch, every rank looks at its own weights and
gradients too, and one small all-reduce (MIN) gives all ranks the same verdict: the
earliest step any of them saw go non-finite. That is the only host synchronisation.

By default the run then stops, every rank alike, with one line naming the step and the
likely cause, before a checkpoint of non-finite weights could replace a good one. With
`keep_going` it goes on after one note; checkpoints of non-finite weights are still never
written.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.distributed as dist

from ..foundation.errors import UsageError
from ..parallel.model_state import local_part

_NONE = math.inf  # "no non-finite step seen", as the MIN reduction wants it


def _finite(tensor: torch.Tensor) -> torch.Tensor:
    """Whether every element is finite, as a tensor, without a temporary of the tensor's size:
    the smallest and largest elements are NaN or ±inf when any element is (a reduction
    propagates NaN). `torch.isfinite(t)` makes a float and two boolean copies of `t` — on
    the 134 MB MLP about 117 MB more at the check's moment, a peak of its own."""
    if tensor.numel() == 0 or not tensor.is_floating_point():
        return torch.ones((), dtype=torch.bool, device=tensor.device)
    return torch.isfinite(torch.stack(torch.aminmax(tensor))).all()


class TrainingDiverged(UsageError):
    """The loss, gradients or weights went non-finite: going on would train nothing and
    could only write NaN over good checkpoints. Not a usage error of a flag, but like one
    it fails the same way every time (a restart would not cure it): exit status 2. Every
    rank reaches the same verdict (one all-reduce) and raises it."""

    STATUS = 2
    same_on_every_rank = True


class NonFiniteGuard:
    def __init__(self, run, model, every: int, keep_going: bool, lr: float, first_step: int,
                 say: Callable[[str], None]):
        self.run, self.every, self.keep_going, self.lr, self.say = run, every, keep_going, lr, say
        self.first_step = first_step  # the step this process started after (0, or where it resumed)
        self.loss_is_local = run.topology.holds_outputs
        self.parameters = [p for p in model.parameters()]
        self.first_bad = torch.full((), _NONE, dtype=torch.float64, device=run.device)
        self.seen: Optional[int] = None  # the step reported, once (keep_going)

    def track(self, loss: torch.Tensor, step: int) -> None:
        """After every step: remembers the first step whose loss is not finite (on the device)."""
        if self.loss_is_local:
            bad = ~torch.isfinite(loss.detach()).all()
            self.first_bad = torch.where(bad & (self.first_bad == _NONE), float(step), self.first_bad)

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def check(self, step: int) -> bool:
        """Collective (every rank calls it at the same step). True when everything is finite;
        otherwise stops the run (TrainingDiverged), or, with keep_going, says so once and
        returns False."""
        tensors = list(self._tensors())
        weights_ok = torch.stack([_finite(t) for t in tensors]).all() if tensors else torch.tensor(True)
        verdict = torch.stack([self.first_bad, torch.where(weights_ok.to(self.first_bad.device), 0.0, -1.0).to(
            self.first_bad.dtype)])
        if dist.is_initialized() and dist.get_world_size() > 1:
            with self.run.watch("non-finite check"):
                dist.all_reduce(verdict, op=dist.ReduceOp.MIN)
        first_bad, weights_bad = verdict.tolist()  # the one host synchronisation
        if first_bad == _NONE and weights_bad == 0:
            return True
        what, cause = self.describe(step, None if first_bad == _NONE else int(first_bad))
        if not self.keep_going:
            raise TrainingDiverged(f"training diverged: {what}; likely cause: {cause}; lower --lr or fix the model, "
                                   "or pass --allow-nonfinite to keep going; no checkpoint of non-finite weights "
                                   "was written")
        if self.seen is None:
            self.seen = step
            self.say(f"scaletrain: warning: training diverged: {what} (likely cause: {cause}); going on "
                     "(--allow-nonfinite), without writing checkpoints while the weights are not finite")
        return False

    def _tensors(self):
        """This process's own parameters and gradients (its shards, under fsdp: the all-reduce
        below combines the verdicts)."""
        for p in self.parameters:
            yield local_part(p.detach())
            if p.grad is not None:
                yield local_part(p.grad.detach())

    def describe(self, step: int, loss_step: Optional[int]) -> tuple[str, str]:
        """(what went non-finite, and when; the likely cause)."""
        if loss_step is not None:
            what = f"the training loss became NaN or inf at step {loss_step}"
        else:
            what = f"the weights or gradients became NaN or inf by step {step}"
        if loss_step == 1 and self.first_step == 0:
            cause = ("the model or the data produce NaN or inf (an overflow, a log or division of 0, inf in the "
                     "inputs): the very first step's loss already is, before the learning rate acted")
        elif not math.isfinite(self.lr) or self.lr >= 1.0:
            cause = f"the learning rate (--lr {self.lr:g}) is far too high"
        else:
            cause = (f"the learning rate (--lr {self.lr:g}) is too high for this model, or the model overflows "
                     "(a layer producing inf)")
        return what, cause

