"""Models larger than one process: built on the meta device (shapes, no memory), parallelised
there (sharded, cut into stages, split by tensor parallel), then materialised as this
process's share only and initialised by the model's own code — with the very weights an
ordinary build from the same random state would have.

An ordinary build draws its random numbers module by module as it constructs them: a
module's children first, then the module's own parameters (`reset_parameters`), and — for a
Hugging Face model — when each pretrained (sub)model's construction ends, one more pass of
its `_init_weights` over the modules it has not initialised yet. Materialising replays that
sequence over the whole model, one module at a time: the module's own tensors are made
whole on the CPU, its init code runs on them (drawing the same numbers in the same order),
and this process keeps its share — its slice of a DTensor, or nothing for another stage's
module. No process holds more than one module's tensors whole at a time; every process
spends the time of initialising the whole model.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from ..foundation.errors import UsageError, by_door


def is_meta(model: nn.Module) -> bool:
    """Whether the model was built on the meta device (any parameter or buffer there)."""
    return any(t.is_meta for t in _tensors(model))


def _tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()


def _hf_pretrained(module: nn.Module) -> bool:
    return callable(getattr(module, "_initialize_weights", None)) and hasattr(module, "config")


def _own_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    own = {name: p for name, p in module._parameters.items() if p is not None}
    own.update({name: b for name, b in module._buffers.items() if b is not None})
    return own


def uninitialisable(model: nn.Module, init_fn: Optional[Callable] = None) -> list[str]:
    """Modules with tensors of their own that nothing would initialise after a meta build (no
    `reset_parameters`, not inside a Hugging Face model, no `init_fn`): their names."""
    if init_fn is not None:
        return []
    covered: set[int] = set()
    for module in model.modules():
        if _hf_pretrained(module):
            covered |= {id(m) for m in module.modules()}
    return [name or type(model).__name__ for name, module in model.named_modules()
            if _own_tensors(module) and not callable(getattr(module, "reset_parameters", None))
            and id(module) not in covered]


@contextlib.contextmanager
def _whole(module: nn.Module, device: torch.device):
    """The module's own tensors made whole, on `device`, for its init code to fill; yields
    {name: (whole tensor, the real one it stands for)}, and puts the real ones back after."""
    real = _own_tensors(module)
    stand_ins = {}
    for name, tensor in real.items():
        shape = tensor.shape  # a DTensor's is the global shape
        whole = torch.empty(shape, dtype=tensor.dtype, device=device)
        stand_ins[name] = (whole, tensor)
        if name in module._parameters:
            module._parameters[name] = nn.Parameter(whole, requires_grad=tensor.requires_grad)
        else:
            module._buffers[name] = whole
    try:
        yield {name: (module._parameters.get(name, module._buffers.get(name)), real[name]) for name in real}
    finally:
        for name, tensor in real.items():
            if name in module._parameters:
                module._parameters[name] = tensor
            else:
                module._buffers[name] = tensor


def _keep_share(values: dict) -> None:
    """Copies each whole tensor's share into the real tensor this process holds (nothing for a
    tensor still on the meta device: another stage's)."""
    for whole, real in values.values():
        if real.is_meta:
            continue
        mesh = getattr(real, "device_mesh", None)
        with torch.no_grad():
            if mesh is None:
                real.copy_(whole.to(real.device))
            else:
                from torch.distributed.tensor import distribute_tensor

                share = distribute_tensor(whole.to(real.device), mesh, real.placements, src_data_rank=None)
                real.to_local().copy_(share.to_local())


def _to_empty_keeping_ties(model: nn.Module, device: torch.device) -> None:
    """`model.to_empty(device)`, with parameters shared by several modules (tied weights)
    still shared afterwards: from the meta device, to_empty gives each module a new tensor of
    its own, which would untie them."""
    shared: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                shared.setdefault(id(param), []).append((module, name))
    model.to_empty(device=device)
    for places in shared.values():
        first_module, first_name = places[0]
        for module, name in places[1:]:
            module._parameters[name] = first_module._parameters[first_name]


def forget_hf_initialised(model: nn.Module) -> None:
    """Hugging Face's marks of modules already initialised (set by a build that skipped its
    init on meta, or by a replay): the replay starts without them, as an ordinary build does."""
    for module in model.modules():
        if getattr(module, "_is_hf_initialized", False):
            del module._is_hf_initialized


class Replay:
    """Runs the model's own initialisation again, module by module, in the order an ordinary
    build draws its random numbers."""

    def __init__(self, work_device: torch.device, init_fn: Optional[Callable] = None,
                 keep: Callable[[dict], None] = _keep_share):
        self.device = work_device
        self.init_fn = init_fn
        self.keep = keep  # what becomes of each module's initialised tensors (meta_check: nothing but a record)
        self.initialised: set[int] = set()

    def run(self, module: nn.Module) -> None:
        for child in module.children():
            self.run(child)
        if self.init_fn is not None:
            self._apply(module, self.init_fn)
        elif callable(getattr(module, "reset_parameters", None)) and _own_tensors(module):
            self._apply(module, lambda m: m.reset_parameters())
        if _hf_pretrained(module):
            # The pass post_init runs when a pretrained model's construction ends: children
            # before their parents, skipping what an inner model already initialised.
            self._hf_pass(module, module)

    def _hf_pass(self, owner: nn.Module, module: nn.Module) -> None:
        for child in module.children():
            self._hf_pass(child if _hf_pretrained(child) else owner, child)
        if getattr(module, "_is_hf_initialized", False):
            return
        self._apply(module, owner._initialize_weights)
        module._is_hf_initialized = True

    def _apply(self, module: nn.Module, init: Callable[[nn.Module], None]) -> None:
        with _whole(module, self.device) as values:
            with torch.no_grad():
                init(module)
            self.keep(values)
        self.initialised.add(id(module))


def materialise(whole_model: nn.Module, local: nn.Module, device: torch.device, rng_state: Optional[torch.Tensor],
                init_fn: Optional[Callable] = None) -> None:
    """Gives `local` (this process's share of `whole_model`, already parallelised; the same
    module objects) memory on `device` and the weights an ordinary build of `whole_model`
    from `rng_state` (torch's CPU generator when it was built) would have. Leaves the
    generator where that build would have left it."""
    missing = uninitialisable(whole_model, init_fn)
    if missing:
        shown = ", ".join(missing[:3]) + (" …" if len(missing) > 3 else "")
        raise UsageError(f"the model was built on the meta device, but {shown} has tensors of its own and no "
                         "reset_parameters() to initialise them; give the module a reset_parameters(), "
                         + by_door("pass init_fn=fn(module) to run.setup, or build the model on a real device",
                                   "or build it whole: --meta-init never"))
    forget_hf_initialised(whole_model)
    _to_empty_keeping_ties(local, device)
    if rng_state is not None:
        torch.set_rng_state(rng_state)
    Replay(torch.device("cpu"), init_fn).run(whole_model)
