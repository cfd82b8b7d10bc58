"""What a model is trained to do decides its loss and its held-out metrics:

- classification: cross-entropy of logits (B, C) against class ids (B,); loss and accuracy;
- regression: mean squared error against float targets; loss;
- lm (language model): cross-entropy at every position of logits (B, T, V) against the next
  tokens (B, T); loss, perplexity (exp of the loss) and next-token accuracy;
- own: the model computes its loss itself (dict batches with labels, as transformers
  models do); loss (what it means is the model's: perplexity is exp of it for a language
  model's cross-entropy).

`derive` picks one from a training sample when the user does not say (--task).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from ..foundation.errors import AgreedError, UsageError
from .gpt import lm_loss


def mse(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(output.float().reshape(targets.shape), targets.float().to(output.device))


@dataclass(frozen=True)
class Task:
    name: str
    loss: Optional[Callable]  # None: the model's own loss
    metrics: tuple[str, ...]
    wants: str = ""  # what the loss needs of the model's output

    @property
    def loss_fn(self) -> Optional[Callable]:
        """The loss, refusing in one line an output it cannot take (a dict from a model that
        computes its own loss, given --task classification)."""
        if self.loss is None:
            return None

        def loss(output, *targets):
            # A Hugging Face model's output holds its logits: the language-model loss takes them;
            # a mixture of experts' (the built-in stdlib-moe's) also its router's balance loss.
            logits = getattr(output, "logits", None) if self.name == "lm" else None
            aux = getattr(output, "aux_loss", None) if self.name == "lm" else None
            if isinstance(logits, torch.Tensor):
                output = logits
            if not isinstance(output, torch.Tensor):
                raise UsageError(f"--task {self.name} needs the model to return {self.wants}, but it returned a "
                                 f"{type(output).__name__}; for a model that computes its own loss use --task own")
            try:
                value = self.loss(output, *targets)
                return value + aux if isinstance(aux, torch.Tensor) else value
            except (RuntimeError, ValueError, IndexError) as exc:
                shapes = [tuple(t.shape) for t in targets if isinstance(t, torch.Tensor)]
                if not shapes or not any(w in str(exc) for w in ("shape", "size", "dimension", "Expected", "out of")):
                    raise
                raise UsageError(f"--task {self.name}: the model's output {tuple(output.shape)} does not fit the "
                                 f"targets {shapes[0]} ({str(exc).splitlines()[0]}); the model must return "
                                 f"{self.wants}") from None
        return loss


TASKS = {t.name: t for t in (
    Task("classification", F.cross_entropy, ("loss", "accuracy"), "a tensor of logits (batch, classes)"),
    Task("regression", mse, ("loss",), "a tensor of predictions"),
    Task("lm", lm_loss, ("loss", "perplexity", "accuracy"), "a tensor of logits (batch, positions, vocabulary)"),
    Task("own", None, ("loss",)),
)}


def derive(sample: Any) -> str:
    """The task a training sample implies: a mapping → the model's own loss; float targets →
    regression; integer targets with a time axis → lm; one integer per sample → classification."""
    if isinstance(sample, Mapping):
        return "own"
    if isinstance(sample, (tuple, list)) and len(sample) >= 2:
        target = torch.as_tensor(sample[1])
        if target.is_floating_point():
            return "regression"
        return "lm" if target.dim() >= 1 else "classification"
    raise UsageError("cannot tell the task from the dataset's samples (not (inputs, targets) pairs nor mappings); "
                     "give --task classification, regression, lm or own")


def _describe(target: torch.Tensor) -> str:
    kind = "floats" if target.is_floating_point() else "integers"
    if target.dim() == 0:
        return f"one {'value' if target.is_floating_point() else 'class id'} per sample ({kind})"
    return f"{target.numel()} {kind} per sample (shape {tuple(target.shape)})"


def first_sample(dataset) -> Any:
    """The dataset's first sample; None for a stream (an IterableDataset is not indexed, and
    reading it here would start it once more on every rank)."""
    try:
        return dataset[0]
    except (TypeError, NotImplementedError, KeyError):
        return None


def check_targets(task: Task, sample: Any) -> None:
    """Refuses, before the first step, a task the dataset's targets cannot be: the loss would
    fail on every rank with a shape or dtype traceback. `sample`: one training sample."""
    if task.loss is None or not (isinstance(sample, (tuple, list)) and len(sample) >= 2):
        return  # the model's own loss, or batches the user's loss_fn reads: nothing known here
    target = torch.as_tensor(sample[1])
    fits = derive(sample)
    wanted = {"classification": "one integer class id per sample",
              "regression": "float targets (the values to predict)",
              "lm": "a sequence of integer token ids per sample (the next tokens)"}[task.name]
    if fits != task.name and not (task.name == "regression" and target.is_floating_point()):
        raise AgreedError(f"--task {task.name} needs {wanted}, but the dataset's targets are {_describe(target)}; "
                         f"give --task {fits} (or leave --task out: it is told from the samples)")


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise UsageError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)} (--task)")
    return TASKS[name]
