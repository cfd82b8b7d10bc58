"""`fsdp`: fully sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`).

Each process keeps 1/N of every parameter, of its gradient and of the optimizer state.
Before a block's forward (and backward) its full parameters are all-gathered, afterwards
freed again; gradients are reduce-scattered so each process gets the sum of its own shard.
Sharding each block separately, then the root, is what lets one block's all-gather overlap
another block's compute and keeps only one block's full parameters alive at a time.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ..precision import PRECISIONS
from .base import Prepared, Strategy
from .model_state import retarget_optimizer


def shard_units(model: nn.Module) -> list[str]:
    """The blocks sharded one by one (then the root takes the rest): a transformer's layers
    (the children of its ModuleLists), else the model's top-level children with parameters.
    A transformer's body is one child holding every layer: sharding it whole would gather
    every layer's parameters at once."""
    layers = [f"{name}.{child}" for name, module in model.named_modules() if isinstance(module, nn.ModuleList)
              for child, block in module.named_children() if any(True for _ in block.parameters())]
    if layers:
        return layers
    return [name for name, block in model.named_children() if any(True for _ in block.parameters())]


class FSDPPrepared(Prepared):
    shards_state = True  # each process holds 1/N: large models are checkpointed sharded

    def autocast(self):
        return contextlib.nullcontext()  # the mixed-precision policy casts (see FSDPStrategy.setup)

    def grad_norm(self, parameters, norm_type=2.0):
        norm = super().grad_norm(parameters, norm_type)
        # Sharded gradients give a partial norm per process; full_tensor() combines them
        # (a sum of powers, or a max for the infinity norm) into the whole model's.
        full_tensor = getattr(norm, "full_tensor", None)
        return full_tensor() if callable(full_tensor) else norm

    @contextlib.contextmanager
    def no_sync(self):
        self.model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.model.set_requires_gradient_sync(True)

    def describe(self):
        return {**super().describe(), "sharded_blocks": self.sharded_blocks, "shards": self.ctx.world_size}


class FSDPStrategy(Strategy):
    name = "fsdp"
    help = "fully sharded data parallel (FSDP2): parameters, gradients and optimizer state split N ways"
    shards_gradients = True

    def policy(self):
        """bf16/fp16: blocks compute in that dtype, parameters and gradient reduction stay
        fp32 (a reduction in 16 bits loses the small gradients' precision)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy  # half a second to import: when used

        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

    def setup(self, ctx, model, optimizer):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        model.to(ctx.device)
        before = dict(model.named_parameters())
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        blocks = shard_units(model)
        policy = self.policy()
        for name in blocks:
            fully_shard(model.get_submodule(name), mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        # fully_shard replaces the parameters with sharded ones: the optimizer must follow.
        prepared = FSDPPrepared(self, ctx, model, retarget_optimizer(optimizer, before, model), module=model)
        prepared.sharded_blocks = blocks
        prepared.banner = (f"scaletrain: fsdp: {len(blocks)} block(s) ({', '.join(blocks)}) and the root sharded "
                           f"{ctx.world_size} ways")
        return prepared

    def describe(self, ctx):
        return {**super().describe(ctx), "shards": ctx.world_size}
