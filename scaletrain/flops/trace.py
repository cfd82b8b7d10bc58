"""One training step seen operator by operator: torch's own FLOP formulas
(`torch.utils.flop_counter`, the registry `FlopCounterMode` counts with), which part of the
step each operator belongs to (forward, backward, or activation checkpointing's recomputation
inside backward), and what a cost model needs besides: a matrix product's m, n, k, an
attention's shape, the bytes a memory-bound operator reads and writes, and the memory live
on the device as the step goes.

It works on real tensors (a run's MFU) and on fake ones (`FakeTensorMode`: a model that no
machine here could hold, traced for the cluster planner in a fraction of a second).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import flop_registry

from . import whole_work
from .attention import (ATTENTION_BACKWARD_NAMES, ATTENTION_FLOPS, ATTENTION_NAMES, attention_backward_flops,
                        attention_flops, attention_shape)
from .grouped_mm import GROUPED_MM_FLOPS

aten = torch.ops.aten

#: Operators that only re-describe memory: no kernel, no bytes moved.
VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "detach", "alias",
         "slice", "select", "split", "split_with_sizes", "unbind", "as_strided", "reshape", "lift_fresh", "chunk",
         "view_as_real", "view_as_complex", "_reshape_alias", "unflatten", "flatten", "narrow", "diagonal",
         "_to_copy_view", "empty_like", "empty", "new_empty", "new_empty_strided", "empty_strided", "sym_size",
         "sym_stride", "sym_numel", "is_same_size", "device", "_local_scalar_dense", "scalar_tensor"}
MATMULS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm"}
ATTENTION = ATTENTION_NAMES - ATTENTION_BACKWARD_NAMES
ATTENTION_BACKWARD = ATTENTION_BACKWARD_NAMES

#: Formulas scaletrain gives instead of torch's (raw: they take the operator's arguments):
#: every attention operator's, the same on every torch (flops/attention.py), and the grouped
#: products a mixture of experts runs, which torch does not count (flops/grouped_mm.py). For
#: `FlopCounterMode(custom_mapping=CUSTOM_FLOPS)`, which counts as a run does.
CUSTOM_FLOPS = {**ATTENTION_FLOPS, **GROUPED_MM_FLOPS}


def _dtensor_type():
    """DTensor where something imported it (no DTensor exists otherwise; importing it costs
    half a second)."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def _first_dtensor(args, kwargs):
    dtensor = _dtensor_type()
    if dtensor is None:
        return None
    return next((x for x in tree_flatten((args, kwargs))[0] if isinstance(x, dtensor)), None)


def _local(x):
    dtensor = _dtensor_type()
    return x._local_tensor if dtensor is not None and isinstance(x, dtensor) else x


def op_flops(func, args, kwargs, out) -> int:
    """FLOPs of one operator as `FlopCounterMode(custom_mapping=CUSTOM_FLOPS)` counts them.
    On DTensors (tensor parallel, torch's context parallel) an equal share of the whole
    operator's FLOPs for each process of their mesh (a DTensor's shape is the whole tensor's):
    summed over the processes, the operator counts once, whether its pieces are split among
    them or each computes it whole (replicated), and whatever redistribution it took. Raises
    what the formula raises (`TraceMode` records it and counts the operator as 0)."""
    packet = func._overloadpacket
    formula = CUSTOM_FLOPS.get(packet) or flop_registry.get(packet)
    if formula is None:
        return 0
    flops = formula(*args, **kwargs, out_val=out)
    dtensor = _first_dtensor(args, kwargs)
    return int(round(flops / dtensor.device_mesh.size())) if dtensor is not None else int(flops)


@dataclass
class Op:
    name: str
    phase: str  # forward, backward, recompute
    kind: str  # matmul, attention, memory
    flops: int = 0
    dtype: str = ""
    shape: tuple = ()  # matmul: (m, n, k, batch); attention: (batch, heads, seq_q, seq_k, head_dim, causal)
    reads: tuple = ()  # memory: ((storage serial, bytes, token-shaped), ...)
    writes: tuple = ()


@dataclass
class StepTrace:
    """What `TraceMode` saw."""
    ops: list = field(default_factory=list)
    forward_flops: int = 0
    backward_flops: int = 0
    recompute_flops: int = 0
    # Live bytes after each operator: (token-shaped, other), and where forward ended.
    timeline: list = field(default_factory=list)
    forward_end: Optional[int] = None
    largest: tuple = (0, 0)  # the largest tensor made: (bytes if token-shaped, bytes otherwise)
    # Operators whose FLOP formula failed, each counted as 0: {operator: why (the first error)}.
    uncounted: dict = field(default_factory=dict)
    # With `fingerprints`: (phase, FLOPs, a number the operator's inputs determine) of each
    # operator counted on plain tensors, so that tensor-parallel peers can tell the ones they
    # all computed alike (replicated: the model's work once, not once per peer).
    pieces: list = field(default_factory=list)

    @property
    def model_flops(self) -> int:
        """Forward and backward: what the model needs (the numerator of MFU)."""
        return self.forward_flops + self.backward_flops

    @property
    def hardware_flops(self) -> int:
        """Also what activation checkpointing computes again."""
        return self.model_flops + self.recompute_flops


def phase() -> str:
    """Inside backward, an operator that records autograd history is a checkpointed block's
    forward run again (backward formulas run without grad mode); so is one run under the
    saved-tensor hooks torch's checkpoint sets for its recomputation (inside a custom
    autograd Function's forward, which runs without grad mode)."""
    if torch._C._current_graph_task_id() == -1:
        return "forward"
    if torch.is_grad_enabled():
        return "recompute"
    try:
        top = torch._C._autograd._top_saved_tensors_default_hooks(True)
    except (AttributeError, TypeError, RuntimeError):
        top = None
    if top and "_recomputation_hook" in getattr(top[0], "__qualname__", ""):
        return "recompute"
    return "backward"


_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64",
           torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8"}


class TraceMode(TorchDispatchMode):
    """Records every operator of what runs inside it into `self.trace`. `detail`: also the
    shapes, bytes and live memory a cost model needs (the planner); without it only the
    FLOPs by phase are kept (cheap enough for a run's one counted step). `batch` and
    `token_count`: a tensor whose first dimension is the batch, or with a dimension of
    `token_count` (batch × sequence, flattened; or any of several such sizes, a tuple: a
    mixture of experts' rows, tokens × top-k, and each expert's share of them), is
    token-shaped, so that a planner can scale a trace to other micro-batches."""

    def __init__(self, detail: bool = False, batch: Optional[int] = None,
                 token_count: Optional[int | tuple] = None, fingerprints: bool = False):
        super().__init__()
        self.trace = StepTrace()
        self.detail, self.batch = detail, batch
        self.token_counts = frozenset(token_count if isinstance(token_count, tuple) else
                                      () if token_count is None else (token_count,))
        self.fingerprints = fingerprints
        self._serial: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._next = 0
        self._live = [0, 0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if name in VIEWS:
            return out
        where = phase()
        try:
            # A parallelism's pieces of whole work count as the whole, once (flops/whole_work.py).
            flops = 0 if whole_work.inside() else op_flops(func, args, kwargs, out)
        except Exception as exc:  # noqa: BLE001 - a formula's failure must never fail the step it counts
            flops = 0
            self.trace.uncounted.setdefault(f"aten.{name}", f"{type(exc).__name__}: {exc}".strip())
        if flops:
            self._add(where, flops)
            if self.fingerprints and _first_dtensor(args, kwargs) is None:
                self.trace.pieces.append((where, flops, _fingerprint(args, kwargs)))
        if self.detail:
            self._record(name, where, flops, args, kwargs, out)
        return out

    def _add(self, where: str, flops: int) -> None:
        setattr(self.trace, f"{where}_flops", getattr(self.trace, f"{where}_flops") + flops)

    def _whole_work(self, kind: str, shape: tuple) -> None:
        self._add(phase(), (attention_backward_flops if kind == "attention_backward" else attention_flops)(*shape))

    def __enter__(self):
        whole_work.listen(self._whole_work)
        return super().__enter__()

    def __exit__(self, *exc):
        whole_work.stop_listening(self._whole_work)
        return super().__exit__(*exc)

    # -- the planner's detail -----------------------------------------------------------------
    def _record(self, name, where, flops, args, kwargs, out) -> None:
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        writes = tuple(self._storage(t, new=True) for t in outputs)
        if name in MATMULS:
            op = Op(name, where, "matmul", flops, _DTYPES.get(inputs[0].dtype if name in ("mm", "bmm", "_scaled_mm")
                                                               else inputs[1].dtype, ""), _matmul_shape(name, args))
        elif name in ATTENTION or name in ATTENTION_BACKWARD:
            backward = name in ATTENTION_BACKWARD
            q = args[1] if backward else args[0]
            causal = bool(kwargs.get("is_causal", _causal_arg(name, args)))
            op = Op(name, where, "attention", flops, _DTYPES.get(q.dtype, ""),
                    (*attention_shape(name, tree_map(_local, args)), causal, backward))
        else:
            reads = tuple(self._storage(t) for t in inputs)
            if name == "embedding":  # a lookup reads the rows it returns, not the whole table
                reads = tuple((serial, sum(w[1] for w in writes), token) for serial, _s, token in reads[1:2]) + \
                    ((reads[0][0], sum(w[1] for w in writes), True),)
            op = Op(name, where, "memory", flops, "", (), reads, writes)
        self.trace.ops.append(op)
        self.trace.timeline.append(tuple(self._live))

    def _storage(self, t: torch.Tensor, new: bool = False) -> tuple:
        """(serial, bytes, token-shaped) of a tensor's storage; a new storage is counted live
        until it is freed."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return (-1, 0, False)
        serial = self._serial.get(storage)
        tokens = (self.batch is not None and t.dim() > 0 and t.shape[0] == self.batch) or \
            (bool(self.token_counts) and not self.token_counts.isdisjoint(_token_dims(t)))
        size = t.numel() * t.element_size()
        if serial is None:
            serial = self._serial[storage] = self._next
            self._next += 1
            if new:
                nbytes = storage.nbytes()
                slot = 0 if tokens else 1
                self._live[slot] += nbytes
                if nbytes > self.trace.largest[slot]:
                    self.trace.largest = (nbytes, self.trace.largest[1]) if tokens else (self.trace.largest[0], nbytes)
                weakref.finalize(storage, self._free, slot, nbytes)
        return (serial, size, tokens)

    def _free(self, slot: int, nbytes: int) -> None:
        self._live[slot] -= nbytes

    def mark_forward_end(self) -> None:
        self.trace.forward_end = len(self.trace.ops)


def _fingerprint(args, kwargs) -> torch.Tensor:
    """A number the operator's floating-point inputs determine (on their device: no wait)."""
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    total = torch.zeros((), dtype=torch.float64, device=tensors[0].device if tensors else "cpu")
    for i, t in enumerate(tensors):
        total = total + (i + 1) * t.detach().sum(dtype=torch.float64).to(total.device)
    return total


def _token_dims(t: torch.Tensor) -> tuple:
    """The tensor's sizes, and their products two by two (batch × sequence, flattened)."""
    shape = tuple(int(s) for s in t.shape)
    return shape + tuple(a * b for a, b in zip(shape, shape[1:]))


def _causal_arg(name: str, args) -> bool:
    # (query, key, value, dropout_p, is_causal, ...) for the forward kernels of SDPA;
    # (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, ...) for the CPU backward.
    position = 7 if name.endswith("_backward") else 4
    return len(args) > position and isinstance(args[position], bool) and args[position]


def _matmul_shape(name: str, args) -> tuple:
    if name == "mm" or name == "_scaled_mm":
        a, b = args[0], args[1]
        return (a.shape[0], b.shape[1], a.shape[1], 1)
    if name == "addmm":
        a, b = args[1], args[2]
        return (a.shape[0], b.shape[1], a.shape[1], 1)
    a, b = (args[0], args[1]) if name == "bmm" else (args[1], args[2])
    return (a.shape[1], b.shape[2], a.shape[2], a.shape[0])
