"""Run under torchrun: ring attention over every process of the job against torch's
scaled_dot_product_attention over whole sequences, forward and backward, causal (the
load-balanced split) and not, with as many key heads as query heads and with half as many
(grouped queries), in float32 and bfloat16. Rank 0 prints one `RING {json}` line per case:
the largest difference of the output and of each gradient (in this process's part)."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
import torch.nn.functional as F

from scaletrain.parallel.ring_attention import ring_attention
from scaletrain.parallel.sequence_split import SequenceSplit


def case(causal: bool, kv_heads: int, dtype: torch.dtype) -> dict:
    rank, size = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(0)
    batch, heads, length, width = 2, 4, 8 * size, 8
    q = torch.randn(batch, heads, length, width, generator=gen).to(dtype).requires_grad_()
    k, v = (torch.randn(batch, kv_heads, length, width, generator=gen).to(dtype).requires_grad_() for _ in range(2))
    grad = torch.randn(batch, heads, length, width, generator=gen).to(dtype)
    whole = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    whole.backward(grad)
    split = SequenceSplit(length, rank, size)
    mine = [split.part(t.detach(), 2).requires_grad_() for t in (q, k, v)]
    out = ring_attention(*mine, None, causal=causal)
    out.backward(split.part(grad, 2))
    errors = {"out": (out - split.part(whole, 2)).abs().max().item()}
    for name, part, full in zip("qkv", mine, (q, k, v)):
        errors[f"d{name}"] = (part.grad - split.part(full.grad, 2)).abs().max().item()
    worst = torch.tensor(list(errors.values()), dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return {"causal": causal, "kv_heads": kv_heads, "dtype": str(dtype).removeprefix("torch."), "processes": size,
            "errors": dict(zip(errors, worst.tolist()))}


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    for causal in (True, False):
        for kv_heads in (4, 2):
            for dtype in (torch.float32, torch.bfloat16):
                row = case(causal, kv_heads, dtype)
                if dist.get_rank() == 0:
                    print("RING " + json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
