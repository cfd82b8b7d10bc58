"""Functions torch.compile must run as they are rather than trace (context parallel's ring:
collectives inside an autograd Function).

`torch.compiler.disable` as a decorator imports torch._dynamo when its module is imported —
over a second on two cores — into every command that merely names the parallelisms: `scaletrain
train` builds its flags and checks from them before it starts the ranks, and that second was
most of its start-up beyond raw torchrun's. So the mark is applied where it can matter: a
process that compiles has imported torch._dynamo (torch.compile does), and there the call goes
through `torch.compiler.disable`'s wrapper; a process that has not imported it compiles nothing,
and the function is called as it is — importing torch._dynamo in the middle of a run (with
Gloo's threads at work) is itself what to avoid: it made a rank abort at exit.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)


def eager_only(fn: F) -> F:
    disabled: list = []

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if "torch._dynamo" not in sys.modules:  # nothing in this process can be compiling
            return fn(*args, **kwargs)
        if not disabled:
            disabled.append(torch.compiler.disable(fn))
        return disabled[0](*args, **kwargs)

    # What torch.compiler.disable marks: a compiled caller does not inline this wrapper either.
    call._torchdynamo_disable = True  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
