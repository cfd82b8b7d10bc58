"""Mixed precision: which dtype the forward computes in, and the loss scaling fp16 needs.

bf16 keeps fp32's exponent range, so autocast alone is enough. fp16 does not: small
gradients underflow to zero, so the loss is multiplied by a large factor before backward
and the gradients divided by it before the optimizer uses them (torch's GradScaler), and a
step whose gradients overflowed is skipped while the factor shrinks. Where the gradients
are sharded (FSDP) each process sees only its shard's overflow: the verdict is agreed over
all processes, or one would step while another skips and the replicas would drift apart.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

#: precision name -> the dtype the forward runs in (None: fp32, no autocast). float8: the
#: linear layers' products in float8 (parallel/float8.py), everything else in bf16.
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16, "float8": torch.bfloat16}


class LossScaler:
    """torch's GradScaler when the precision is fp16; otherwise every call passes through.
    `unscale` may be called once per optimizer step (clipping needs true gradients) and is
    then skipped by `step`."""

    def __init__(self, precision: str, device: torch.device, sharded_gradients: bool = False):
        self.enabled = precision == "fp16"
        self.sharded = sharded_gradients
        self.device = device
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.enabled) if self.enabled else None
        self._unscaled: set[int] = set()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.enabled else loss

    def factor(self) -> float | torch.Tensor:
        """What the loss is multiplied by before backward (for losses the strategy computes
        inside its own schedule, such as a pipeline's)."""
        if not self.enabled:
            return 1.0
        return self.scaler.scale(torch.ones((), device=self.device))

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.enabled or id(optimizer) in self._unscaled:
            return
        self.scaler.unscale_(optimizer)
        self._unscaled.add(id(optimizer))
        if self.sharded and dist.is_initialized() and dist.get_world_size() > 1:
            # Each process checked only its own shards for inf/nan: agree on one verdict.
            for found in self.scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values():
                dist.all_reduce(found, op=dist.ReduceOp.MAX)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.enabled:
            optimizer.step()
            return
        self.unscale(optimizer)  # a no-op when clipping did it already
        self.scaler.step(optimizer)

    def update(self) -> None:
        """After every optimizer of the step has stepped: the new scale for the next one."""
        if self.enabled:
            self.scaler.update()
        self._unscaled.clear()

    def state_dict(self) -> Optional[dict]:
        return self.scaler.state_dict() if self.enabled else None

    def load_state_dict(self, state: Optional[dict]) -> None:
        if self.enabled and state:
            self.scaler.load_state_dict(state)
