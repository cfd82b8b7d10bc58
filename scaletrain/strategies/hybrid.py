"""`hybrid`: DistributedDataParallel whose every replica is itself split across its process's
devices like `mp` (process p owns cuda:p*K..p*K+K-1). DDP all-reduces the gradients of the
whole split replica; inside a process, activations move between the parts."""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from .mp import ModelParallelStrategy, MPPrepared


class HybridPrepared(MPPrepared):
    def no_sync(self):
        return self.model.no_sync()


class HybridStrategy(ModelParallelStrategy):
    name = "hybrid"
    help = "DDP + model parallel: each process splits its replica across K devices"
    Prepared = HybridPrepared
    multi_process = True

    def wrap(self, ctx, parted):
        # device_ids must stay None: the replica spans several devices.
        return DistributedDataParallel(parted, device_ids=None, gradient_as_bucket_view=True)
