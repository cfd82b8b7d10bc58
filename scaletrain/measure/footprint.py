"""How many bytes a model needs: parameters, gradients, optimizer state and the activations
a forward keeps for backward. Counted from the tensors themselves, so it is the same on
every device and needs no allocator statistics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
from torch import nn

from .attention import attention_facts


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
    """Parameters of the largest unit: what a sharded strategy gathers at once."""
    block_param_bytes: tuple
    """Parameter bytes of each unit in order (for splitting into pipeline stages)."""
    grad_tensor_bytes: tuple = ()
    """Bytes of each trainable parameter's gradient, in the order backward produces them
    (the reverse of registration): how DDP fills its communication buckets."""
    boundary_bytes_per_sample: float = 0.0
    """The largest output of a unit but the last, per sample: what a pipeline stage sends to
    the next one."""
    unit_output_bytes_per_sample: tuple = ()
    """Each unit's output but the last's, per sample: what a stage ending with it sends."""
    block_tp_param_bytes: tuple = ()
    """Parameter bytes of each unit that tensor parallel splits (empty: the model has no
    tensor-parallel plan)."""
    block_tp_reduce_bytes_per_sample: tuple = ()
    """Per unit, the bytes per sample tensor parallel all-reduces in one forward: the outputs
    of its row-wise layers (backward all-reduces as many, at the column-wise layers' inputs)."""
    block_activation_bytes_per_sample: tuple = ()
    """Per unit, the bytes per sample its forward keeps for backward (a pipeline stage keeps
    its units')."""
    checkpointed_activation_bytes_per_sample: dict = field(default_factory=dict)
    """What forward keeps per sample under activation checkpointing, by mode ("full":
    each block's input; "selective": its input and the outputs of its matrix products)."""
    largest_tensor_bytes: int = 0
    """The largest parameter: its gradient's temporary before it lands where it lives."""
    recompute_height: float = 0.0
    """Under full checkpointing, backward's height over a checkpointed block: what it holds
    computing the block again and going back through it, in units of that block's saved
    activations (measured: the GPT 0.9, a Llama with SwiGLU 1.7); 0: not measured."""
    attention_kv_bytes_per_sample: tuple = ()
    """Each attention of a forward: its keys and values over whole sequences, bytes per sample
    (what context parallel's ring passes round, a 1/cp piece per hop); empty: no attention seen."""
    attention_flop_share: float = 0.0
    """Attention's share of a forward's arithmetic (what a ring hop can hide behind)."""
    attention_sequence: int = 0
    """The tokens of a sequence the attentions attend over (what context parallel splits)."""

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


def model_units(model: nn.Module) -> tuple[list[Callable], list[list[nn.Module]]]:
    """(each unit's forward, each unit's modules): the consecutive units pipeline stages are
    cut from (an nn.Sequential's blocks, a Llama-style decoder's embeddings, layers and head);
    for other models the top-level children, or the model as one unit."""
    from ..parallel.stage_units import has_units, units_of

    if has_units(model):
        units = units_of(model, "the plan")
        return [u.run for u in units], [list(u.modules.values()) for u in units]
    children = list(model.children()) or [model]
    return children, [[c] for c in children]


def _unique_parameters(modules: list[nn.Module]) -> list[torch.Tensor]:
    seen, found = set(), []
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                found.append(p)
    return found


def unit_output_bytes(model: nn.Module, inputs: torch.Tensor) -> list[int]:
    """Each unit's output but the last's, for one forward of `inputs`: what a pipeline stage
    that ends with that unit sends to the next."""
    runs, _ = model_units(model)
    sizes: list[int] = []
    with torch.no_grad():
        x = inputs
        for run in runs[:-1]:
            x = run(x)
            sizes.append(x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0)
    return sizes


def block_bytes(model: nn.Module) -> list[int]:
    _, modules = model_units(model)
    return [tensor_bytes(_unique_parameters(unit)) for unit in modules]


def tensor_parallel_bytes(model: nn.Module, inputs: torch.Tensor) -> tuple[tuple, tuple]:
    """(each unit's parameter bytes that tensor parallel splits, each unit's row-wise outputs
    in bytes per sample), from the model's own tensor-parallel plan; empty without one."""
    import fnmatch

    from ..parallel.tensor_parallel import declared_plan

    rules = declared_plan(model)
    if not rules:
        return (), ()
    styled = {module: style for path, module in model.named_modules() for key, style in rules.items()
              if fnmatch.fnmatchcase(path, key)}
    outputs: dict[int, int] = {}
    hooks = [m.register_forward_hook(lambda mod, _i, out: outputs.__setitem__(
                 id(mod), outputs.get(id(mod), 0) + out.numel() * out.element_size()))
             for m, style in styled.items() if style.startswith("rowwise")]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    _, units = model_units(model)
    params, reduces = [], []
    for unit in units:
        inside = {id(m) for top in unit for m in top.modules()}
        split = [m for m in styled if id(m) in inside]
        params.append(tensor_bytes(_unique_parameters(split)))
        reduces.append(sum(outputs.get(id(m), 0) for m in split) / max(1, len(inputs)))
    return tuple(params), tuple(reduces)


def _saved_by_unit(model: nn.Module, runs: list[Callable], inputs: torch.Tensor, targets, loss_fn) -> list[int]:
    """Bytes each unit's forward saves for backward (storages counted once, parameters not)."""
    current = [0]
    saved: dict[int, tuple[int, int]] = {}  # storage -> (unit, bytes)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t: torch.Tensor):
        key = t.untyped_storage().data_ptr()
        if key not in saved and key not in params:
            saved[key] = (current[0], t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x = inputs
        for i, run in enumerate(runs):
            current[0] = i
            x = run(x)
        loss = loss_fn(x, targets)
    del loss
    totals = [0] * len(runs)
    for unit, nbytes in saved.values():
        totals[unit] += nbytes
    return totals


def _unit_inputs(runs: list[Callable], inputs: torch.Tensor) -> list[int]:
    """Bytes of each unit's input tensor (what checkpointing keeps of it)."""
    sizes, x = [], inputs
    with torch.no_grad():
        for run in runs:
            sizes.append(x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0)
            x = run(x)
    return sizes


def _kept_by_policy(model: nn.Module, inputs: torch.Tensor) -> int:
    """Bytes of the outputs selective checkpointing keeps (matrix products, attention)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from ..parallel.checkpointing import kept_ops

    keep, total = kept_ops(), [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in keep:
                first = out[0] if isinstance(out, (tuple, list)) else out
                if isinstance(first, torch.Tensor):
                    total[0] += first.numel() * first.element_size()
            return out

    with torch.enable_grad(), Count():
        model(inputs)
    return total[0]


def checkpointed_activations(model: nn.Module, runs: list[Callable], inputs: torch.Tensor, per_unit: list[int]
                             ) -> dict:
    """What forward keeps under each activation checkpointing mode, per sample: the blocks'
    inputs (and, selective, their matrix products' outputs), and whole what is not a block."""
    from ..parallel.blocks import model_blocks

    blocks = set(model_blocks(model))
    _, units = model_units(model)
    names = [{n for n, m in model.named_modules() if m in unit} for unit in units]
    checkpointed = [bool(n & blocks) for n in names]
    inputs_kept = _unit_inputs(runs, inputs)
    outside = sum(saved for saved, c in zip(per_unit, checkpointed) if not c)
    full = outside + sum(size for size, c in zip(inputs_kept, checkpointed) if c)
    selective = full + _kept_by_policy(model, inputs)
    n = max(1, len(inputs))
    return {"full": full / n, "selective": selective / n}


def recompute_height(model: nn.Module, inputs, targets, loss_fn, per_unit: list[int], kept_full: float) -> float:
    """Backward's height over one block under full checkpointing, in units of the largest
    block's saved activations: from the peak of live tensors of a forward and backward
    without checkpointing and with every block checkpointed (their difference is what
    checkpointing saves), less what it keeps. 0 where the model has no blocks to checkpoint."""
    from ..parallel.blocks import model_blocks
    from ..parallel.checkpointing import checkpoint_block
    from .live_bytes import LiveBytes

    names = model_blocks(model)
    largest = max(per_unit, default=0)
    if not names or not largest:
        return 0.0

    def peak() -> int:
        with LiveBytes() as live:
            loss_fn(model(inputs), targets).backward()
        return live.peak

    blocks = [model.get_submodule(name) for name in names]
    own = [block.__dict__.get("forward") for block in blocks]
    try:
        plain = peak()
        for block in blocks:
            checkpoint_block(block)
        checkpointed = peak()
    except Exception:  # noqa: BLE001 - a model checkpointing cannot run here: the plan's default height
        return 0.0
    finally:
        for block, forward in zip(blocks, own):
            if forward is None:
                del block.forward
            else:
                block.forward = forward
    whole = sum(per_unit)
    return max(0.0, (whole - kept_full) - (plain - checkpointed)) / largest


def measure_footprint(model: nn.Module, optimizer: torch.optim.Optimizer, inputs, targets, loss_fn) -> Footprint:
    """Call after at least one optimizer step, so that the optimizer's state exists."""
    blocks = block_bytes(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    tp_params, tp_reduces = tensor_parallel_bytes(model, inputs)
    runs, _ = model_units(model)
    per_unit = _saved_by_unit(model, runs, inputs, targets, loss_fn)
    n = max(1, len(targets))
    outputs = unit_output_bytes(model, inputs)
    kept = checkpointed_activations(model, runs, inputs, per_unit)
    kv, attention_share, sequence = attention_facts(model, inputs)
    return Footprint(
        param_bytes=tensor_bytes(model.parameters()),
        grad_bytes=tensor_bytes(trainable),
        optimizer_bytes=optimizer_state_bytes(optimizer),
        activation_bytes_per_sample=activation_bytes(model, inputs, targets, loss_fn) / max(1, len(targets)),
        largest_block_param_bytes=max(blocks) if blocks else 0,
        block_param_bytes=tuple(blocks),
        grad_tensor_bytes=tuple(tensor_bytes([p]) for p in reversed(trainable)),
        boundary_bytes_per_sample=max(outputs, default=0) / n,
        unit_output_bytes_per_sample=tuple(b / n for b in outputs),
        block_tp_param_bytes=tp_params,
        block_tp_reduce_bytes_per_sample=tp_reduces,
        block_activation_bytes_per_sample=tuple(b / n for b in per_unit),
        checkpointed_activation_bytes_per_sample=kept,
        largest_tensor_bytes=max((tensor_bytes([p]) for p in trainable), default=0),
        recompute_height=recompute_height(model, inputs, targets, loss_fn, per_unit, kept["full"] * n),
        attention_kv_bytes_per_sample=kv,
        attention_flop_share=attention_share,
        attention_sequence=sequence,
    )
