"""`ddp`: DistributedDataParallel — one process per device, gradients all-reduced in buckets
while backward is still running, so communication overlaps computation."""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from .base import Strategy


class DDPStrategy(Strategy):
    name = "ddp"
    help = "DistributedDataParallel: one process per device, gradients all-reduced"

    def setup(self, run, model, optimizer):
        model.to(run.device)
        ddp = DistributedDataParallel(
            model,
            device_ids=[run.device.index] if run.device.type == "cuda" else None,
            # Gradients live in the communication buckets: one copy less per step.
            gradient_as_bucket_view=True,
        )
        return self.remember(ddp, optimizer)

    def no_sync(self, model):
        return model.no_sync()
