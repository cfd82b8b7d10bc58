"""Whether a user's samples can be batched: the default collation stacks each tensor of the
samples of a batch, so tensors of different shapes (sequences of different lengths) cannot
share one. Checked before training, so that it is one line at the start — not a traceback at
the first step, or at the first evaluation after an epoch of training (the held-out set is
batched by --eval-batch-size, which is larger than training's batch)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch.utils.data import IterableDataset

#: Samples looked at: every one of a held-out set up to this many, the first of a training set
#: (batches are shuffled: a few batches' worth).
LOOKED_AT = 10_000


def shapes(sample: Any) -> tuple:
    """The shapes of the tensors (and arrays) in a sample, in order; other values leave none."""
    if isinstance(sample, torch.Tensor) or hasattr(sample, "shape") and hasattr(sample, "dtype"):
        return (tuple(sample.shape),)
    if isinstance(sample, dict):
        return tuple(s for key in sorted(sample, key=str) for s in shapes(sample[key]))
    if isinstance(sample, (list, tuple)):
        return tuple(s for value in sample for s in shapes(value))
    return ()


def first_difference(dataset, limit: int = LOOKED_AT) -> Optional[str]:
    """'sample 0 holds (37,), sample 3 holds (52,)' where two of the first `limit` samples
    cannot be stacked together; None where they can (or the data is a stream: not looked at)."""
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
        return None
    first = None
    for index in range(min(len(dataset), limit)):
        found = shapes(dataset[index])
        if first is None:
            first = found
        elif found != first:
            return f"sample 0 holds {_text(first)}, sample {index} holds {_text(found)}"
    return None


def _text(found: tuple) -> str:
    return ", ".join(str(s) for s in found) or "no tensor"
