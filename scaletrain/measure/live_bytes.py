"""The bytes of tensors alive at once while some code runs, counted from the tensors
themselves (a dispatch mode that sees every operator's outputs and is told when their
storage is freed): a peak that no allocator statistic gives on a CPU, where resident memory
also holds what the allocator kept."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as live: ...` then `live.peak`: the most bytes the operators inside
    had allocated and not yet freed at any moment (tensors made before it are not counted)."""

    def __init__(self):
        super().__init__()
        self.now = 0
        self.peak = 0
        self._alive: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self.now -= nbytes
        self._alive.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key and key not in self._alive:  # a view or an in-place result is no new memory
                self._alive.add(key)
                self.now += storage.nbytes()
                self.peak = max(self.peak, self.now)
                weakref.finalize(storage, self._freed, key, storage.nbytes())
        return out
