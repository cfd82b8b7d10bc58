"""Work a parallelism computes in pieces of its own making, told whole to whoever counts the
model's FLOPs (a run's MFU, `scaletrain.flops`), so that the model's FLOPs per step are the
same whatever the strategy.

Context parallel's ring attends a process's queries to every piece of the sequence in turn,
block by block, and skips the blocks causal masking empties: counted operator by operator,
its attention would be neither the model's attention nor the same from one degree of cp to
the next. Inside `attention(...)` the ring's own operators are not counted; the attention of
this process's queries to the whole sequence is, once.
"""

from __future__ import annotations

import contextlib
from typing import Callable

#: Counters listening: each gets (kind, shape) on leaving a piece of whole work.
_listeners: list[Callable[[str, tuple], None]] = []
_depth = 0


def listen(listener: Callable[[str, tuple], None]) -> None:
    _listeners.append(listener)


def stop_listening(listener: Callable[[str, tuple], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def inside() -> bool:
    """Whether the operators running now are pieces of whole work (not to be counted)."""
    return _depth > 0


@contextlib.contextmanager
def attention(batch: int, q_heads: int, q_len: int, k_len: int, qk_dim: int, v_dim: int, backward: bool = False):
    """The operators inside compute (pieces of) the attention of `q_len` queries to `k_len`
    keys: that is what counts."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if _depth == 0:
        for listener in list(_listeners):
            listener("attention_backward" if backward else "attention",
                     (batch, q_heads, q_len, k_len, qk_dim, v_dim))
