"""Users' own models and datasets, named as `module:function` (like `mypkg.models:build`)."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn
from torch.utils.data import Dataset

from ..foundation.errors import UsageError
from ..foundation.user_code import load_factory


def build_user_model(spec: str) -> nn.Module:
    model = _call(load_factory(spec, "--model"), spec, "--model")
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {spec!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def build_user_datasets(spec: str, seed: int, held_out_fraction: float = 0.2) -> tuple[Dataset, Dataset]:
    """The factory returns a Dataset (split here, by the seed) or a (train, held_out) pair."""
    import torch
    from torch.utils.data import random_split

    made = _call(load_factory(spec, "--dataset"), spec, "--dataset")
    if isinstance(made, (tuple, list)) and len(made) == 2 and all(isinstance(d, Dataset) for d in made):
        if _length(made[0]) == 0:
            raise UsageError(f"--dataset {spec!r}: its training split is empty (0 samples); return a (train, "
                             "held_out) pair whose first part holds samples")
        return made[0], made[1]
    if not isinstance(made, Dataset):
        raise UsageError(f"--dataset {spec!r} returned {type(made).__name__}; "
                         "return a torch.utils.data.Dataset or a (train, held_out) pair of them")
    n = len(made)
    held_out = max(1, int(n * held_out_fraction))
    if n < 2:
        raise UsageError(f"--dataset {spec!r} has {n} samples; need at least 2 to hold some out")
    train, test = random_split(made, [n - held_out, held_out], generator=torch.Generator().manual_seed(seed))
    return train, test


def _length(dataset: Dataset):
    """len(dataset), or None for a stream (an IterableDataset has no length)."""
    try:
        return len(dataset)
    except TypeError:
        return None


def _call(factory: Callable[[], Any], spec: str, flag: str) -> Any:
    try:
        return factory()
    except Exception as exc:
        raise UsageError(f"{flag} {spec!r} raised {type(exc).__name__}: {exc}") from None
