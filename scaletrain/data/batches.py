"""What a batch is, how the model is called on it, and where the loss comes from.

Users bring batches in three shapes, and models that answer in several:

- a sequence `(inputs, *rest)` — the classic `(inputs, targets)` pair: `model(inputs)`, and
  the loss is `loss_fn(output, *rest)`;
- a mapping, as Hugging Face models take them (`input_ids`, `attention_mask`, `labels`):
  `model(**batch)`, and the loss is `loss_fn(output, batch)`;
- a lone tensor: `model(batch)`, and the loss is `loss_fn(output, batch)` (a language model
  whose targets are its shifted inputs).

Without a loss function the loss is the output's own (`output.loss` or `output["loss"]`,
as transformers models return when given labels); a tensor output with targets falls back
to cross-entropy, as the library always did. Nothing here assumes the output is a tensor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from ..foundation.errors import UsageError
from .lm_loss import cross_entropy

#: `targets` when the caller gave none (None is a legitimate target of nothing).
NO_TARGETS: Any = type("NoTargets", (), {"__repr__": lambda self: "NO_TARGETS"})()


def move_to(batch: Any, device: torch.device) -> Any:
    """Moves tensors (possibly nested in tuples, lists, dicts) to the device."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):  # dict, or transformers' BatchEncoding: handed on as a dict
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [move_to(b, device) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


def split(batch: Any, targets: Any = NO_TARGETS) -> tuple[Any, tuple]:
    """(what the model is called with, what the loss function gets after the output)."""
    if targets is not NO_TARGETS:
        return batch, (targets,)
    if isinstance(batch, Mapping) or isinstance(batch, torch.Tensor):
        return batch, (batch,)
    if isinstance(batch, Sequence) and not isinstance(batch, str) and len(batch) >= 1:
        return batch[0], tuple(batch[1:])
    return batch, (batch,)


def call_model(model: Callable, inputs: Any) -> Any:
    """`model(**inputs)` for a mapping, `model(inputs)` otherwise."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    return model(inputs)


def own_loss(output: Any) -> Optional[torch.Tensor]:
    """The loss a model computed itself (transformers with labels), or None."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


def first_tensor(value: Any) -> Optional[torch.Tensor]:
    """The first tensor inside an output of any shape (for its device)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def compute_loss(output: Any, rest: tuple, loss_fn: Optional[Callable], inputs: Any = None) -> torch.Tensor:
    """The loss of one forward, by the rules in the module docstring."""
    if loss_fn is not None:
        anchor = first_tensor(output)
        # Model-parallel outputs come out on the last part's device: the targets go there.
        rest = move_to(rest, anchor.device) if anchor is not None else rest
        return loss_fn(output, *rest)
    own = own_loss(output)
    if own is not None:
        return own
    if isinstance(output, torch.Tensor) and len(rest) == 1 and isinstance(rest[0], torch.Tensor) \
            and rest[0] is not inputs:
        if output.dim() == 2:  # (samples, classes): the cross-entropy below, chunked over samples where on
            return cross_entropy(output, rest[0].to(output.device))
        return F.cross_entropy(output.float(), rest[0].to(output.device))
    raise UsageError("the model's output has no loss of its own (no .loss) and no loss function was given; "
                     "pass loss_fn=... (e.g. torch.nn.functional.cross_entropy), or give the model labels")


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (0 when there is none)."""
    tensor = first_tensor(batch if not isinstance(batch, Mapping) else list(batch.values()))
    return int(tensor.shape[0]) if tensor is not None and tensor.dim() > 0 else 0
