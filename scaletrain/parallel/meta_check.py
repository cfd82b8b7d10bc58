"""Whether meta-device initialisation will reproduce an ordinary build of this model.

Materialising a model built on the meta device runs its modules' own initialisation again
(meta_init.py's Replay). That equals an ordinary build only when the constructor did nothing
else to the values: not a buffer computed in `__init__` (a mask, a table of frequencies) that
no `reset_parameters` computes again, not an initialisation of its own after the children
were built (`nn.init.orthogonal_(self.proj.weight)`), not weights tied after both modules drew
theirs (an ordinary build keeps the first module's values; a replay, the second's). Each would
change what the model trains: uninitialised memory, another distribution, other numbers.

So the build is recorded (init_trace.py: the provenance of every tensor's values, from meta
kernels only), the initialisation is replayed on the meta device under the same recording, and
every parameter and buffer is compared, as is the random generator's state at the end (the
draws after initialisation, such as dropout's, must start where an ordinary build leaves
them). Nothing is computed and no memory is taken: a second pass over the modules' init code.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from .init_trace import Provenance, recording, storage_key
from .meta_init import Replay, forget_hf_initialised


def _named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor, bool]]:
    """(name, tensor, is a buffer) for every parameter and buffer, tied ones under each name."""
    found = [(name, p, False) for name, p in model.named_parameters(remove_duplicate=False)]
    found += [(name, b, True) for name, b in model.named_buffers(remove_duplicate=False)]
    return found


def meta_build_difference(model: nn.Module, built: Optional[Provenance]) -> Optional[str]:
    """replay_difference for a model whose meta-device build `built` recorded; None for a model
    not on the meta device, built where nothing recorded it, or with modules nothing would
    initialise (materialise refuses those, naming them)."""
    from .meta_init import is_meta, uninitialisable

    if built is None or not is_meta(model) or uninitialisable(model):
        return None
    return replay_difference(model, built)


def replay_difference(model: nn.Module, built: Provenance, init_fn: Optional[Callable] = None) -> Optional[str]:
    """None when replaying the initialisation of `model` (built on the meta device while
    `built` recorded) gives every tensor the values an ordinary build would; else what
    differs, in words."""
    tensors = _named_tensors(model)
    replayed = Provenance()
    for _name, tensor, _buffer in tensors:  # as materialise's to_empty leaves them
        replayed.set(tensor, replayed.uninitialised(tensor), "to_empty")

    def keep(values: dict) -> None:  # as _keep_share copies each whole tensor into the real one
        for whole, real in values.values():
            key = storage_key(whole)
            replayed.set(real, replayed.by_storage[key], replayed.last_op.get(key, ""))

    forget_hf_initialised(model)
    try:
        with recording(replayed):
            Replay(torch.device("meta"), init_fn, keep).run(model)
    finally:
        forget_hf_initialised(model)
    for name, tensor, is_buffer in tensors:
        key = storage_key(tensor)
        if built.by_storage.get(key) != replayed.by_storage.get(key):
            return _why(name, tensor, is_buffer, tensors, built, replayed)
    if init_fn is None and built.rng != replayed.rng:
        return ("its constructor draws random numbers that its modules' initialisation does not draw again, so the "
                "random state after it would differ")
    return None


def _why(name: str, tensor: torch.Tensor, is_buffer: bool, tensors: list, built: Provenance,
         replayed: Provenance) -> str:
    key = storage_key(tensor)
    tied = [other for other, t, _ in tensors if other != name and storage_key(t) == key]
    made, last = built.made_by.get(key, ""), built.last_op.get(key, "")
    if tied:
        return (f"'{name}' is tied to '{tied[0]}', whose initial values an ordinary build and a replay of each "
                "module's initialisation would take from different modules")
    if is_buffer and made == last and made not in ("", "to_empty") and "empty" not in made:
        return (f"its buffer '{name}' is computed in the constructor ({made}), and no reset_parameters() computes it "
                "again")
    redone = replayed.last_op.get(key, "")
    return (f"'{name}' is set in the constructor ({last or 'unrecorded'}) other than by its module's own "
            f"initialisation ({redone if redone != 'to_empty' else 'none'})")
