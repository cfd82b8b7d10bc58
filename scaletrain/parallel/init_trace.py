"""Where every tensor's values come from, recorded while code runs on the meta device.

A model built on the meta device has shapes and no values; meta-device initialisation gives
it values afterwards by running its modules' own initialisation again (meta_init.py). Whether
that reproduces an ordinary build is a question of provenance: for every parameter and
buffer, the chain of operations that produced its values — which operation, on what inputs,
with which draw of the random generator. Recording that chain while the constructor runs on
the meta device, and again while the initialisation is replayed there (nothing is computed:
meta kernels only), and comparing the two answers it without building the model for real.

Each storage gets a provenance: a digest of the operation that wrote it last, its non-tensor
arguments, the provenances of its tensor arguments (with their view: offset, shape, strides)
and, for an operation that draws random numbers from the default generator, the state of that
generator — itself a digest of every draw before it, so that one extra or missing draw
anywhere changes every value drawn after it. A write that covers a whole storage (`fill_`,
`uniform_`, `copy_` …) replaces its provenance; any other in-place write folds the old one in.
Storages made by `empty` and the like, and those `to_empty` materialises, are "uninitialised".

`torch.nn.init`'s `orthogonal_`, `trunc_normal_`, `sparse_` and `dirac_` return at once on a
meta tensor, drawing nothing; they ask the tensor `is_meta` first, which a torch-function mode
sees, so each such call is recorded as the write (and the draw) it would be.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from typing import Any, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

#: In-place operations whose result does not depend on the values they overwrite.
OVERWRITES = frozenset({"fill_", "zero_", "uniform_", "normal_", "random_", "bernoulli_", "exponential_",
                        "geometric_", "log_normal_", "cauchy_", "copy_"})
#: Operations that make a storage without values.
UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
#: torch.nn.init's functions that skip meta tensors: recorded as the write they would make.
SKIPPED_ON_META = frozenset({"orthogonal_", "_no_grad_trunc_normal_", "sparse_", "dirac_"})
_IS_META = torch._C.TensorBase.__dict__["is_meta"]
#: transformers' function that asks whether models are being built on the meta device.
_HF_DEVICE_PROBE = "get_torch_context_manager_or_global_device"


def _digest(*parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()


def storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _whole_storage(tensor: torch.Tensor) -> bool:
    return (tensor.storage_offset() == 0 and tensor.is_contiguous()
            and tensor.numel() * tensor.element_size() == tensor.untyped_storage().nbytes())


class Provenance:
    """The provenance of every storage seen, and the default generator's state."""

    def __init__(self):
        self.by_storage: dict[int, str] = {}
        self.last_op: dict[int, str] = {}  # which operation wrote each storage last (for messages)
        self.made_by: dict[int, str] = {}  # which operation made each storage
        self.rng = "rng-start"
        self._kept: list[torch.Tensor] = []  # storages stay alive while recorded, so no key is reused

    def uninitialised(self, tensor: torch.Tensor) -> str:
        return _digest("uninitialised", tensor.dtype, tensor.untyped_storage().nbytes())

    def of(self, tensor: torch.Tensor) -> str:
        key = storage_key(tensor)
        if key not in self.by_storage:  # made where nothing recorded it: a value nobody can replay
            self.set(tensor, _digest("unrecorded", key), "a tensor made outside the recorded code")
        return _digest(self.by_storage[key], tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()),
                       tensor.dtype)

    def set(self, tensor: torch.Tensor, provenance: str, op: str) -> None:
        key = storage_key(tensor)
        if key not in self.by_storage:
            self.made_by[key] = op
            self._kept.append(tensor)
        self.by_storage[key] = provenance
        self.last_op[key] = op

    def describe(self, value: Any, written: frozenset = frozenset()) -> Any:
        """An argument as it enters a provenance: tensors by theirs (one being written, by its
        place alone), the rest by value."""
        if isinstance(value, torch.Tensor):
            return ("written",) if id(value) in written else ("tensor", self.of(value))
        if isinstance(value, (list, tuple)):
            return tuple(self.describe(v, written) for v in value)
        if isinstance(value, torch.Generator):
            return ("generator", id(value))  # another generator than the default: never replayed alike
        if isinstance(value, torch.device):
            # Where a value is computed does not change it here: the recorded build runs on the
            # meta device, the replay's own arithmetic on the CPU, and an ordinary build on the CPU.
            return "device"
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return str(value)
        return repr(value)

    def draw(self, what: Any) -> str:
        """A draw from the default generator: the generator's state before it; advances it."""
        before = self.rng
        self.rng = _digest(before, what)
        return before

    def record(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        name = func._schema.name.split("::")[-1]
        written = self._written(func, args, kwargs)
        targets = frozenset(id(t) for t in written)
        # What is written enters by its place only; what it held, below, unless overwritten whole.
        inputs = (self.describe(args, targets), self.describe(sorted(kwargs.items()), targets))
        if torch.Tag.nondeterministic_seeded in func.tags and not any(
                isinstance(v, torch.Generator) for v in (*args, *kwargs.values())):
            inputs = (*inputs, ("draw", self.draw((str(func), inputs))))
        for tensor in written:
            old = None if name in OVERWRITES and _whole_storage(tensor) else self.of(tensor)
            self.set(tensor, _digest(str(func), inputs, tensor.storage_offset(), tuple(tensor.shape),
                                     tuple(tensor.stride()), old), str(func))
        fresh = [r.alias_info is None for r in func._schema.returns]
        results = out if isinstance(out, (list, tuple)) else (out,)
        for index, (result, is_fresh) in enumerate(zip(results, fresh)):
            if isinstance(result, torch.Tensor) and is_fresh and not written:
                made = self.uninitialised(result) if name in UNINITIALISED else _digest(str(func), inputs, index)
                self.set(result, made, str(func))

    @staticmethod
    def _written(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        found = []
        for position, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = kwargs.get(argument.name, args[position] if position < len(args) else None)
            found += [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, torch.Tensor)]
        return found

    def skipped_init(self, function: str, tensor: torch.Tensor) -> None:
        """torch.nn.init's `function` on `tensor`, which returns at once on the meta device."""
        described = (function, tuple(tensor.shape), tensor.dtype)
        draw = self.draw(described) if function != "dirac_" else None
        self.set(tensor, _digest("nn.init", described, draw, tensor.storage_offset()), f"torch.nn.init.{function.strip('_')}_")


class _Dispatch(TorchDispatchMode):
    def __init__(self, provenance: Provenance):
        super().__init__()
        self.provenance = provenance

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.provenance.record(func, args, kwargs, out)
        return out


class _InitCalls(TorchFunctionMode):
    def __init__(self, provenance: Provenance):
        super().__init__()
        self.provenance = provenance

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.tensor and sys._getframe(1).f_code.co_name == _HF_DEVICE_PROBE:
            # Hugging Face skips its weight initialisation when it sees a model built on the
            # meta device; an ordinary build runs it, so the recorded build must too (meta
            # kernels: nothing is computed).
            return func(*args, **{**(kwargs or {}), "device": "cpu"})
        result = func(*args, **(kwargs or {}))
        if getattr(func, "__self__", None) is _IS_META and result is True:
            caller = sys._getframe(1)
            if caller.f_globals.get("__name__") == "torch.nn.init" and caller.f_code.co_name in SKIPPED_ON_META:
                self.provenance.skipped_init(caller.f_code.co_name, args[0])
        return result


@contextlib.contextmanager
def recording(provenance: Optional[Provenance] = None) -> Iterator[Provenance]:
    """Records the provenance of every tensor the code inside makes or writes."""
    provenance = provenance or Provenance()
    with _InitCalls(provenance), _Dispatch(provenance):
        yield provenance
