"""What FSDP's and tensor parallel's own machinery adds to a step, measured on one process.

FSDP2 gathers each block's parameters into a buffer and copies them out before its forward,
copies the gradients into a buffer for the reduce-scatter after its backward, and keeps its
parameters as DTensors: work a plain step does not do, whatever the world size. On a CPU it
is large beside a small model's step (synthetic-cnn: 22 ms a plain step, 36 ms under fsdp on
one process), and the all-gathers and reduce-scatters timed alone do not show it.

Tensor parallel turns every layer of its plan into DTensor operations, each dispatched
through DTensor's sharding rules before it computes; on a small model that is a cost of its
own, whatever the split (stdlib-gpt on one thread: 58 ms a plain step, 76 ms with its plan
applied on a mesh of one), which the arithmetic's share and the all-reduces timed alone do
not show.

The probe's one-process job runs a few steps of the same model prepared the way the
strategy prepares it — sharded per block then at the root; its tensor-parallel plan applied —
on a mesh of one, and the plan adds the difference to every configuration with FSDP or
tensor parallel.

On a mesh of one, tensor parallel's DTensors dispatch but never wait: its processes do not
exchange anything and none waits for another. The probe's job of several processes therefore
also times a real tensor-parallel step across all of them (each fed the same batch, as a
tensor-parallel group is): on this machine's 2 cores stdlib-gpt's tp × 2 ran 91 ms a step
where the mesh-of-one figure made 66. What that step takes beyond the plan's own prediction of
it is the machinery the plan adds to tensor-parallel configurations (costs/tensor_parallel.py).
"""

from __future__ import annotations

import time
import warnings
from typing import Callable, Iterator, Optional

import torch
from torch import nn


def _fsdp_prepare(model: nn.Module, mesh) -> None:
    from torch.distributed.fsdp import fully_shard

    from ..parallel.blocks import model_blocks

    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    for name in model_blocks(model):
        fully_shard(model.get_submodule(name), mesh=mesh)
    fully_shard(model, mesh=mesh)


def _tp_prepare(model: nn.Module, mesh) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    from ..parallel.tensor_parallel import declared_plan, tp_style

    plan = declared_plan(model)
    if not plan:
        raise ValueError("no tensor-parallel plan")
    parallelize_module(model, mesh, {key: tp_style(style, key) for key, style in plan.items()})


def _prepared_step_seconds(prepare: Callable[[nn.Module, object], None], build_model: Callable[[], nn.Module],
                           lr: float, batches: Iterator, loss_fn: Optional[Callable], device: torch.device,
                           steps: int, warmup: int, mesh_size: int = 1,
                           on_prepared: Optional[Callable[[], None]] = None) -> Optional[float]:
    """Mean seconds of a training step of a fresh model prepared by `prepare(model, mesh)` on a
    mesh of `mesh_size` processes (1: this process alone; otherwise the whole process group,
    every rank calling this alike), with the optimizer as the strategies retarget it; None
    where the model cannot be prepared so."""
    from torch.distributed.device_mesh import init_device_mesh

    from ..data.batches import call_model, compute_loss, move_to, split
    from ..parallel.model_state import retarget_optimizer
    from ..train.optimizer import adam

    try:
        model = build_model().to(device)
        before = dict(model.named_parameters())
        optimizer = adam(model.parameters(), lr=lr)
        prepare(model, init_device_mesh(device.type, (mesh_size,)))
        retarget_optimizer(optimizer, before, model)
        del before  # the whole model's parameters, which the prepared model no longer holds
    except Exception:  # noqa: BLE001 - a model this cannot prepare: no figure, not a failed probe
        return None
    if on_prepared is not None:
        on_prepared()

    def step() -> None:
        inputs, rest = move_to(split(*next(batches)), device)
        optimizer.zero_grad(set_to_none=True)
        compute_loss(call_model(model, inputs), rest, loss_fn, inputs).backward()
        optimizer.step()

    def synchronise() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        step()
    synchronise()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    synchronise()
    return (time.perf_counter() - started) / steps


def same_batches(batches: Iterator, device: torch.device) -> Iterator:
    """One batch of rank 0's, the same on every rank (what a tensor-parallel group is fed), again
    and again: for timing, the data need not change. Every rank's batch has the same shapes."""
    import itertools

    import torch.distributed as dist
    from torch.utils._pytree import tree_flatten

    from ..data.batches import move_to, split

    inputs, rest = move_to(split(*next(batches)), device)
    for tensor in tree_flatten((inputs, rest))[0]:
        if isinstance(tensor, torch.Tensor):
            dist.broadcast(tensor, src=0)
    return itertools.repeat((inputs, *rest))


def fsdp_step_seconds(build_model: Callable[[], nn.Module], lr: float, batches: Iterator, loss_fn: Optional[Callable],
                      device: torch.device, steps: int, warmup: int, mesh_size: int = 1,
                      on_prepared: Optional[Callable[[], None]] = None) -> Optional[float]:
    """A step under fully_shard on a mesh of `mesh_size` processes (None: the model cannot be
    sharded); `on_prepared()` is called once the model is sharded, before its first step."""
    return _prepared_step_seconds(_fsdp_prepare, build_model, lr, batches, loss_fn, device, steps, warmup, mesh_size,
                                  on_prepared)


def tp_step_seconds(build_model: Callable[[], nn.Module], lr: float, batches: Iterator, loss_fn: Optional[Callable],
                    device: torch.device, steps: int, warmup: int, mesh_size: int = 1) -> Optional[float]:
    """A step with the model's tensor-parallel plan applied on a mesh of `mesh_size` processes
    (None: the model has no plan)."""
    return _prepared_step_seconds(_tp_prepare, build_model, lr, batches, loss_fn, device, steps, warmup, mesh_size)
