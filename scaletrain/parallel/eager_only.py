"""Functions torch.compile must run as they are rather than trace (context parallel's ring:
collectives inside an autograd Function): `torch.compiler.disable`, applied at the first call.

Applied as a decorator when its module is imported, it would import torch._dynamo — over a
second on two cores — into every command that merely names the parallelisms: `scaletrain
train` builds its flags and checks from them before it starts the ranks, and that second was
most of its start-up beyond raw torchrun's. A compiled model imports torch._dynamo anyway.
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)


def eager_only(fn: F) -> F:
    disabled: list = []

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not disabled:
            disabled.append(torch.compiler.disable(fn))
        return disabled[0](*args, **kwargs)

    # What torch.compiler.disable marks: a compiled caller does not inline this wrapper either.
    call._torchdynamo_disable = True  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
