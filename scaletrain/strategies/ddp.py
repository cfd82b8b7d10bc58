"""`ddp`: DistributedDataParallel — one process per device, gradients all-reduced in buckets
while backward is still running, so communication overlaps computation.

Options (`scaletrain.init("ddp", **options)`, or `TrainConfig.strategy_options`):
  grad_compression  none | bf16 | fp16 | powersgd: send gradients in fewer bytes
                    (see `ddp_compression`); for models whose steps are spent communicating.
  bucket_cap_mb     size of DDP's gradient buckets (torch's default, 25 MB, when left out).
  static_graph      True when every step uses the same parameters in the same order
                    (no data-dependent branches): DDP then skips per-step bookkeeping.
                    Off by default: torch's DDP then fails in no_sync() before the first
                    synchronised step, which gradient accumulation does.
  powersgd_rank     the rank of PowerSGD's low-rank approximation (default 2).
"""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from ..errors import UsageError
from .base import Strategy
from .ddp_compression import COMPRESSIONS, register_compression


class DDPStrategy(Strategy):
    name = "ddp"
    help = "DistributedDataParallel: one process per device, gradients all-reduced"
    option_flags = {"grad_compression": "--grad-compression", "bucket_cap_mb": "--bucket-cap-mb",
                    "static_graph": "static_graph (library only)", "powersgd_rank": "powersgd_rank (library only)"}

    def __init__(self, **options):
        super().__init__(**options)  # refuses options not in option_flags
        compression = options.get("grad_compression") or "none"
        if compression not in COMPRESSIONS:
            raise UsageError(f"--grad-compression {compression!r}: choose one of {', '.join(COMPRESSIONS)}")
        self.compression = compression

    def ddp_kwargs(self, run) -> dict:
        kwargs = {
            "device_ids": [run.device.index] if run.device.type == "cuda" else None,
            # Gradients live in the communication buckets: one copy less per step.
            "gradient_as_bucket_view": True,
            "static_graph": bool(self.options.get("static_graph", False)),
        }
        if self.options.get("bucket_cap_mb") is not None:
            kwargs["bucket_cap_mb"] = float(self.options["bucket_cap_mb"])
        return kwargs

    def setup(self, run, model, optimizer):
        model.to(run.device)
        ddp = DistributedDataParallel(model, **self.ddp_kwargs(run))
        register_compression(ddp, self.compression, powersgd_rank=int(self.options.get("powersgd_rank", 2)))
        return self.remember(ddp, optimizer)

    def no_sync(self, model):
        return model.no_sync()

    def describe(self, run) -> dict:
        return {**super().describe(run), "grad_compression": self.compression,
                "static_graph": bool(self.options.get("static_graph", False)),
                "bucket_cap_mb": self.options.get("bucket_cap_mb")}
