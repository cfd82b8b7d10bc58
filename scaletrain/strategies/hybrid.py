"""`hybrid`: DistributedDataParallel whose every replica is itself split across its process's
devices like `mp` (process p owns cuda:p*K..p*K+K-1). DDP all-reduces the gradients of the
whole split replica; inside a process, activations move between the parts."""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from .mp import ModelParallelStrategy


class HybridStrategy(ModelParallelStrategy):
    name = "hybrid"
    help = "DDP + model parallel: each process splits its replica across K devices"
    multi_process = True

    def setup(self, run, model, optimizer):
        # device_ids must stay None: the replica spans several devices.
        ddp = DistributedDataParallel(self.parted(run, model), device_ids=None, gradient_as_bucket_view=True)
        return self.remember(ddp, optimizer)

    def parted_of(self, model):
        return model.module  # DDP -> PartedModel

    def no_sync(self, model):
        return model.no_sync()
