"""Users' own models and datasets, named as `module:function` (like `mypkg.models:build`)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable

from torch import nn
from torch.utils.data import Dataset

from ..errors import UsageError


def load_factory(spec: str, flag: str) -> Callable[[], Any]:
    """Imports `module:function`; every failure is one UsageError naming the flag."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise UsageError(f"{flag} {spec!r}: expected module:function, e.g. {flag} mymodels:build_model")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the current folder is importable
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while importing
        raise UsageError(f"{flag} {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc}); "
                         "run from the folder that holds it or add that folder to PYTHONPATH") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise UsageError(f"{flag} {spec!r}: module {module_name!r} has no function {func_name!r}")
    return func


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
