"""Gradient compression for DDP: fewer bytes on the wire for models whose steps are spent
communicating (large Linear layers, little compute per byte of gradient).

  none      fp32 all-reduce (exact).
  bf16      gradients cast to bfloat16 for the all-reduce, back to fp32 after: half the
            bytes; bfloat16 keeps fp32's range, so no overflow, ~3 significant digits.
  fp16      the same with float16: more precision than bf16 but a narrower range (gradients
            are divided by the world size before the cast to keep sums in range).
  powersgd  low-rank approximation of each gradient matrix with error feedback (Vogels et
            al., 2019); many times fewer bytes, at some cost in accuracy per step. The first
            steps run plain all-reduces, as PowerSGD needs stable buckets to start from.

bf16 and fp16 are DDP communication hooks written here, because torch's own bf16 hook
accepts only NCCL (it refuses Gloo on CPUs, where the bytes matter just as much); powersgd
is torch's (`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

COMPRESSIONS = ("none", "bf16", "fp16", "powersgd")

#: PowerSGD starts compressing at this step (it must be > 1; earlier steps are exact).
POWERSGD_START_STEP = 2


def cast_compress_hook(dtype: torch.dtype):
    """A DDP hook that all-reduces each gradient bucket in `dtype` and averages it back into
    the fp32 bucket. Dividing by the world size before the sum keeps fp16 sums in range.

    Two things decide whether compression pays on a CPU, both measured on a 42 MB bucket set:
    - the low-precision copy of a bucket is kept from step to step: a fresh 21 MB tensor each
      step is fresh pages the kernel must fault in and zero (~25 ms, as much as the bytes save);
    - the divide runs in place in fp32, then a plain dtype copy: `torch.div(fp32, n, out=bf16)`
      takes a mixed-dtype path ~7× slower than the two passes together.
    """
    staging: dict[int, torch.Tensor] = {}  # bucket index -> its low-precision copy

    def hook(process_group, bucket):  # no annotations: DDP checks them, and ours would be strings
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()
        compressed = staging.get(bucket.index())
        if compressed is None or compressed.shape != buffer.shape or compressed.device != buffer.device:
            # First step, or DDP rebuilt its buckets after the first step (new sizes).
            compressed = staging[bucket.index()] = torch.empty(buffer.shape, dtype=dtype, device=buffer.device)
        buffer.div_(group.size())
        compressed.copy_(buffer)
        future = dist.all_reduce(compressed, group=group, async_op=True).get_future()

        def decompress(done):
            buffer.copy_(done.value()[0])
            return buffer
        return future.then(decompress)
    hook.__name__ = f"{str(dtype).removeprefix('torch.')}_compress_hook"
    return hook


def register_compression(ddp: DistributedDataParallel, compression: str, powersgd_rank: int = 2) -> None:
    """Registers the hook for `compression` on `ddp` (nothing for "none")."""
    if compression == "none":
        return
    if compression == "bf16":
        ddp.register_comm_hook(None, cast_compress_hook(torch.bfloat16))
    elif compression == "fp16":
        ddp.register_comm_hook(None, cast_compress_hook(torch.float16))
    elif compression == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd_rank,
                                            start_powerSGD_iter=POWERSGD_START_STEP)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        raise ValueError(f"unknown gradient compression {compression!r}")
