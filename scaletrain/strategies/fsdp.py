"""`fsdp`: fully sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`).

Each process keeps 1/N of every parameter, of its gradient and of the optimizer state.
Before a block's forward (and backward) its full parameters are all-gathered, afterwards
freed again; gradients are reduce-scattered so each process gets the sum of its own shard.
Sharding each block separately, then the root, is what lets one block's all-gather overlap
another block's compute and keeps only one block's full parameters alive at a time.
"""

from __future__ import annotations

import contextlib

from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from .base import Strategy
from .model_state import rebuild_optimizer


class FSDPStrategy(Strategy):
    name = "fsdp"
    help = "fully sharded data parallel (FSDP2): parameters, gradients and optimizer state split N ways"

    def setup(self, run, model, optimizer):
        model.to(run.device)
        before = dict(model.named_parameters())
        mesh = init_device_mesh(run.device.type, (run.world_size,))
        self.sharded_blocks = [name for name, block in model.named_children()
                               if any(True for _ in block.parameters())]
        for name in self.sharded_blocks:
            fully_shard(getattr(model, name), mesh=mesh)
        fully_shard(model, mesh=mesh)
        run.print(f"scaletrain: fsdp: {len(self.sharded_blocks)} block(s) ({', '.join(self.sharded_blocks)}) "
                  f"and the root sharded {run.world_size} ways")
        # fully_shard replaces the parameters with sharded ones: the optimizer must follow.
        return self.remember(model, rebuild_optimizer(optimizer, before, model))

    @contextlib.contextmanager
    def no_sync(self, model):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    def describe(self, run):
        return {**super().describe(run), "sharded_blocks": self.sharded_blocks, "shards": run.world_size}
