"""Context parallel's attention on one device, in one process (no ring partner needed):

- the ring's kernels: attention of whole sequences computed as two blocks of keys (the second
  causal for the diagonal, as a ring step is), each block's output and log-sum-exp from the
  kernel scaletrain's ring uses on this device (CUDA: the memory-efficient kernel, whose
  log-sum-exp is padded; CPU: the flash kernel for CPUs), merged by their log-sum-exps, and
  the backward of each block from the merged output — against torch's attention, fp32 and bf16;
- torch's context-parallel attention (CUDA only): the pieces as DTensors on a mesh of this
  one device, through torch's dispatcher, against torch's attention.

    python tests/gpu/workers/cp_attention.py --device cuda

One `KERNEL {json}` line per case and one `TORCH {json}` line (or `TORCH {"skipped": why}`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from scaletrain.parallel import cp_attention  # noqa: E402
from scaletrain.parallel.ring_attention import _merge, block_attention, block_backward  # noqa: E402


def inputs(device, dtype, length=96, heads=4, width=32):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(2, heads, length, width, generator=gen).to(device, dtype).requires_grad_() for _ in range(4)]


def kernels(device: str, dtype: torch.dtype) -> dict:
    q, k, v, grad = inputs(device, dtype)
    grad = grad.detach()
    whole = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    whole.backward(grad)
    scale, half = q.shape[-1] ** -0.5, q.shape[2] // 2
    # Rows of the second half attend to the first half whole, then causally to their own half.
    rows = slice(half, q.shape[2])
    with torch.no_grad():
        out = torch.zeros(q.shape, dtype=torch.float32, device=device)
        lse = torch.full(q.shape[:3], float("-inf"), dtype=torch.float32, device=device)
        first = slice(0, half)
        o, l = block_attention(q[:, :, first], k[:, :, first], v[:, :, first], True, scale)
        _merge(out, lse, first, o, l)
        o, l = block_attention(q[:, :, rows], k[:, :, first], v[:, :, first], False, scale)
        _merge(out, lse, rows, o, l)
        o, l = block_attention(q[:, :, rows], k[:, :, rows], v[:, :, rows], True, scale)
        _merge(out, lse, rows, o, l)
        merged = out.to(dtype)
        dq, dk, dv = (torch.zeros(t.shape, dtype=torch.float32, device=device) for t in (q, k, v))
        for qr, kr, causal in ((first, first, True), (rows, first, False), (rows, rows, True)):
            g = block_backward(grad[:, :, qr].contiguous(), q[:, :, qr], k[:, :, kr], v[:, :, kr],
                               merged[:, :, qr].contiguous(), lse[:, :, qr].contiguous(), causal, scale)
            dq[:, :, qr] += g[0].float()
            dk[:, :, kr] += g[1].float()
            dv[:, :, kr] += g[2].float()
    errors = {"out": (merged.float() - whole.float()).abs().max().item()}
    for name, mine, ref in (("dq", dq, q.grad), ("dk", dk, k.grad), ("dv", dv, v.grad)):
        errors[name] = (mine - ref.float()).abs().max().item()
    return {"dtype": str(dtype).removeprefix("torch."), "device": str(q.device), "errors": errors}


def torch_path(device: str) -> dict:
    if device != "cuda":
        return {"skipped": "torch's context-parallel attention dispatches CUDA kernels only"}
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("cp",))
        cp_attention.enable_torch_path()
        q, k, v, grad = inputs("cuda", torch.bfloat16, length=128, width=64)
        whole = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        whole.backward(grad.detach())
        refs = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        out = cp_attention._torch_ring(q, k, v, mesh, True, None)
        out.backward(grad.detach())
        errors = {"out": (out.float() - whole.float()).abs().max().item()}
        errors.update({f"d{n}": (t.grad.float() - r.float()).abs().max().item() for n, t, r in zip("qkv", (q, k, v), refs)})
        return {"torch": torch.__version__, "errors": errors}
    finally:
        dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", required=True)
    device = p.parse_args().device
    for dtype in (torch.float32, torch.bfloat16):
        print("KERNEL " + json.dumps(kernels(device, dtype)), flush=True)
    try:
        result = torch_path(device)
    except Exception as exc:  # noqa: BLE001 - the check's line says what torch's path did
        result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    print("TORCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
