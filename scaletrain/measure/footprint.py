"""How many bytes a model needs: parameters, gradients, optimizer state and the activations
a forward keeps for backward. Counted from the tensors themselves, so it is the same on
every device and needs no allocator statistics."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Footprint:
    param_bytes: int
    """Bytes of all parameters."""
    grad_bytes: int
    """Bytes of the gradients (those of trainable parameters): what data parallel all-reduces."""
    optimizer_bytes: int
    """Bytes of the optimizer's state after one step (Adam: two moments per parameter)."""
    activation_bytes_per_sample: float
    """Bytes the forward saves for backward, per sample of the batch."""
    largest_block_param_bytes: int
    """Parameters of the largest top-level block: what a sharded strategy gathers at once."""
    block_param_bytes: tuple
    """Parameter bytes of each top-level block in order (for splitting into pipeline stages)."""
    grad_tensor_bytes: tuple = ()
    """Bytes of each trainable parameter's gradient, in the order backward produces them
    (the reverse of registration): how DDP fills its communication buckets."""
    boundary_bytes_per_sample: float = 0.0
    """The largest output of a top-level block but the last, per sample: what a pipeline
    stage sends to the next one."""

    def as_dict(self) -> dict:
        return asdict(self)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(tensor_bytes(v for v in state.values() if isinstance(v, torch.Tensor))
               for state in optimizer.state.values())


def activation_bytes(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn) -> int:
    """Bytes of the tensors autograd saves during one forward (what backward will need)."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        # The same storage saved twice (an input kept by two ops) is held in memory once.
        key = t.untyped_storage().data_ptr() if t.device.type != "meta" else id(t)
        saved[key] = max(saved.get(key, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(inputs), targets)
    del loss
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for key, size in saved.items() if key not in params)


def boundary_bytes(model: nn.Module, inputs: torch.Tensor) -> int:
    """Largest output of a top-level block other than the last, for one forward of `inputs`."""
    children = list(model.children())
    sizes: list[int] = []
    hooks = [c.register_forward_hook(lambda _m, _i, out: sizes.append(
        out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0)) for c in children[:-1]]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return max(sizes, default=0)


def block_bytes(model: nn.Module) -> list[int]:
    children = list(model.children()) or [model]
    return [tensor_bytes(c.parameters()) for c in children]


def measure_footprint(model: nn.Module, optimizer: torch.optim.Optimizer, inputs, targets, loss_fn) -> Footprint:
    """Call after at least one optimizer step, so that the optimizer's state exists."""
    blocks = block_bytes(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return Footprint(
        param_bytes=tensor_bytes(model.parameters()),
        grad_bytes=tensor_bytes(trainable),
        optimizer_bytes=optimizer_state_bytes(optimizer),
        activation_bytes_per_sample=activation_bytes(model, inputs, targets, loss_fn) / max(1, len(targets)),
        largest_block_param_bytes=max(blocks) if blocks else 0,
        block_param_bytes=tuple(blocks),
        grad_tensor_bytes=tuple(tensor_bytes([p]) for p in reversed(trainable)),
        boundary_bytes_per_sample=boundary_bytes(model, inputs) / max(1, len(targets)),
    )
