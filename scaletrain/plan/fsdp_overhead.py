"""What FSDP's own machinery adds to a step, measured on one process.

FSDP2 gathers each block's parameters into a buffer and copies them out before its forward,
copies the gradients into a buffer for the reduce-scatter after its backward, and keeps its
parameters as DTensors: work a plain step does not do, whatever the world size. On a CPU it
is large beside a small model's step (synthetic-cnn: 22 ms a plain step, 36 ms under fsdp on
one process), and the all-gathers and reduce-scatters timed alone do not show it. The probe's
one-process job runs a few steps of the same model sharded the way the fsdp strategy shards
it (every block, then the root) on a mesh of one, and the plan adds the difference to every
configuration with FSDP.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable, Iterator, Optional

import torch


def fsdp_step_seconds(build_model: Callable[[], torch.nn.Module], lr: float, batches: Iterator,
                      loss_fn: Optional[Callable], device: torch.device, steps: int, warmup: int) -> Optional[float]:
    """Mean seconds of a training step of a fresh model under fully_shard on this process
    alone (the process group must be of one process); None where the model cannot be
    sharded (the plan then leaves FSDP's own cost out)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from ..batches import call_model, compute_loss, move_to, split
    from ..parallel.blocks import model_blocks
    from ..train.optimizer import adam

    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    try:
        model = build_model().to(device)
        mesh = init_device_mesh(device.type, (1,))
        for name in model_blocks(model):
            fully_shard(model.get_submodule(name), mesh=mesh)
        fully_shard(model, mesh=mesh)
    except Exception:  # noqa: BLE001 - a model FSDP cannot shard: no figure, not a failed probe
        return None
    optimizer = adam(model.parameters(), lr=lr)

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
