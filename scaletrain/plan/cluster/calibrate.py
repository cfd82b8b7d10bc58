"""Measuring the GPU this process runs on, for the cluster planner (`scaletrain calibrate`,
`benchmarks/calibrate_gpu.py`):

- matrix multiplies (bf16, and fp8 through torch._scaled_mm where the GPU has fp8) over the
  shapes a transformer layer's forward and backward use (tokens × hidden × hidden/ffn/vocab,
  and the transposed products of the weight gradients);
- attention by torch's scaled_dot_product_attention (the kernel this torch picks on this GPU)
  forward and backward, over sequence lengths, causal and not, at head sizes 64 and 128, as
  TFLOP/s counted the way torch's FLOP counter counts them (the whole score matrix);
- memory-bound kernels (copy, add, multiply, SiLU, dtype casts) as bytes moved per second,
  and one small kernel's launch overhead;
- whole transformer layers (the planner's own reference layer, forward and backward, in the
  shapes of Llama 3 8B and of a 70B layer split 8 ways) timed as a training step runs them,
  against the sum of their kernels' times from the figures just measured: the in-step
  efficiency, how much slower kernels run in a step (fresh inputs, caches, power) than alone.

`measure(dry)` returns the calibration as a dict (the format `hardware.calibration` reads);
about a minute on an H100 or H200. `dry`: the same code with tiny shapes on the CPU.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

#: Sizes of m, n and k: tokens (micro-batch × sequence), hidden sizes and their tensor-parallel
#: shards, feed-forward widths (Llama 3's 14,336 and 28,672) and vocabulary shards.
GPU_DIMS = (1024, 4096, 8192, 14336, 32768)
GPU_EXTRA = ((8192, 28672, 8192), (8192, 8192, 28672), (16384, 16032, 4096), (16384, 4096, 16032),
             (4096, 14336, 16384), (2048, 1024, 4096), (2048, 4096, 1024), (65536, 4096, 4096))
GPU_SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
GPU_HEAD_DIMS = (128, 64)
DRY_DIMS = (32, 64, 128)
DRY_SEQS = (64, 128)
DRY_HEAD_DIMS = (16,)


def timed(fn, device: torch.device, repeat: int, budget_s: float = 0.5) -> float:
    """Median seconds of one call of `fn` (after a warm-up), fewer repeats for slow calls."""
    fn()
    sync(device)
    times = []
    start = time.perf_counter()
    for _ in range(repeat):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s and len(times) >= 2:
            break
    return sorted(times)[len(times) // 2]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmuls(device, dtype, dims, extra, repeat) -> list[dict]:
    rows = []
    shapes = [(m, n, k) for m in dims for n in dims for k in dims] + list(extra)
    for m, n, k in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)  # as nn.Linear holds it: x @ w.T
        seconds = timed(lambda: a @ w.t(), device, repeat)
        rows.append({"dtype": _name(dtype), "m": m, "n": n, "k": k, "seconds": seconds,
                     "tflops": 2 * m * n * k / seconds / 1e12})
        del a, w
    return rows


def fp8_matmuls(device, dims, extra, repeat) -> list[dict]:
    """torch._scaled_mm with tensorwise scales, as torchao's float8 training calls it."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
        return []
    rows = []
    one = torch.ones((), device=device)
    for m, n, k in [(m, n, k) for m in dims for n in dims for k in dims] + list(extra):
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
        try:
            seconds = timed(lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                            device, repeat)
        except RuntimeError:  # a shape the fp8 kernels refuse (alignment)
            continue
        rows.append({"dtype": "fp8", "m": m, "n": n, "k": k, "seconds": seconds,
                     "tflops": 2 * m * n * k / seconds / 1e12})
        del a, w
    return rows


def attention(device, dtype, seqs, tokens, heads, head_dim, repeat) -> list[dict]:
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    rows = []
    for causal in (True, False):
        for seq in seqs:
            batch = max(1, tokens // seq)
            shape = (batch, heads, seq, head_dim)
            q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
            grad = torch.randn(shape, device=device, dtype=dtype)

            def forward():
                with _flash(device):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def both():
                out = forward()
                out.backward(grad)
            try:
                fwd = timed(forward, device, repeat)
                total = timed(both, device, repeat)
            except RuntimeError as exc:  # out of memory at the longest sequences, say
                print(f"attention seq {seq}: skipped ({str(exc).splitlines()[0]})")
                continue
            f_flops = sdpa_flop_count(shape, shape, shape)
            b_flops = sdpa_backward_flop_count(shape, shape, shape, shape)
            rows.append({"seq": seq, "batch": batch, "heads": heads, "head_dim": head_dim, "causal": causal,
                         "forward_seconds": fwd, "backward_seconds": max(total - fwd, 1e-9),
                         "forward_tflops": f_flops / fwd / 1e12,
                         "backward_tflops": b_flops / max(total - fwd, 1e-9) / 1e12})
            del q, k, v, grad
    return rows


def attention_kernel_name(device, dtype=torch.bfloat16) -> str:
    """Which kernel scaled_dot_product_attention runs here (a causal bf16 call, head size 128,
    as the rows above make): the names of the kernels a profiler sees, so that the calibration
    says what software its attention rates describe."""
    from torch.profiler import ProfilerActivity, profile

    q = torch.randn(1, 8, 1024, 128 if device.type == "cuda" else 16, device=device, dtype=dtype)
    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        with _flash(device):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        sync(device)
    names = {e.name for e in prof.events() if any(w in e.name.lower() for w in ("flash", "cudnn", "fmha", "attention"))}
    return "; ".join(sorted(names)[:3]) or "unknown"


def _flash(device):
    if device.type != "cuda":
        import contextlib
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])


def memory_bound(device, sizes, repeat) -> list[dict]:
    rows = []
    for size in sizes:  # bytes of one bf16 operand
        n = size // 2
        x, y = torch.randn(n, device=device, dtype=torch.bfloat16), torch.randn(n, device=device, dtype=torch.bfloat16)
        ops = {"copy": (lambda: x.clone(), 2 * size), "add": (lambda: x + y, 3 * size),
               "mul": (lambda: x * y, 3 * size), "silu": (lambda: F.silu(x), 2 * size),
               "to_fp32": (lambda: x.float(), 3 * size)}
        for name, (fn, moved) in ops.items():
            seconds = timed(fn, device, repeat)
            rows.append({"op": name, "bytes": moved, "seconds": seconds, "gb_per_s": moved / seconds / 1e9})
        del x, y
    return rows


def launch_overhead(device) -> float:
    """Microseconds per small kernel in a stream of them (eager launches, one sync at the end)."""
    x = torch.ones(1024, device=device)
    for _ in range(50):
        x.add_(1.0)
    sync(device)
    count = 2000
    start = time.perf_counter()
    for _ in range(count):
        x.add_(1.0)
    sync(device)
    return (time.perf_counter() - start) / count * 1e6


def layers_in_step(device, result: dict, dry: bool, say=print) -> list[dict]:
    """Measured time of the planner's reference layers (forward + backward, bf16, flash
    attention) against the planner's prediction of the same layers from `result`."""
    from ...hardware import HardwareProfile
    from ...hardware.calibration import Calibration
    from ...workloads.model_shapes import BUILTIN, ModelShape
    from .compute import Execution, part_time
    from .reference import ReferenceLM
    from .traced import Variant, trace

    calibration = Calibration.from_dict({**result, "layer_efficiency": 1.0}, "just measured")
    profile = HardwareProfile("measured", "", (), 0, 0, 8, {"bf16": 1e15}, {}, {}, "", calibration)
    if dry:
        cases = [(ModelShape("tiny", "llama", 64, 2, 4, 2, 16, 128, 256, 256), 1, 64, 2, "none")]
    else:
        s8, s70 = BUILTIN["llama3-8b"], BUILTIN["llama3-70b"]
        cases = [(s8, 1, 8192, 1, "none"), (s8, 1, 4096, 2, "full"), (s70, 8, 8192, 2, "none")]
    rows = []
    for shape, tp, seq, mb, ac in cases:
        layers = 2 if dry else 4
        torch.manual_seed(0)
        with torch.device(device):
            previous = torch.get_default_dtype()
            torch.set_default_dtype(torch.bfloat16)
            model = ReferenceLM(shape, layers, tp=tp)
            torch.set_default_dtype(previous)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.02)
        stack = torch.nn.Sequential(*model.layers)
        x = torch.randn(mb, seq, shape.hidden, device=device, dtype=torch.bfloat16, requires_grad=True)
        angles = torch.arange(seq, device=device, dtype=torch.float32)[:, None] * torch.ones(shape.head_dim, device=device)
        cos, sin = angles.cos()[None, :, None, :].to(x.dtype), angles.sin()[None, :, None, :].to(x.dtype)
        grad = torch.randn_like(x)

        def step():
            y = x
            for layer in stack:
                y = torch.utils.checkpoint.checkpoint(layer, y, cos, sin, use_reentrant=False) if ac == "full" \
                    else layer(y, cos, sin)
            y.backward(grad)
        for _ in range(2):
            step()
        measured = timed(step, device, 4 if dry else 10, budget_s=2.0) / layers
        layer_costs, _rest, _one = trace(shape, Variant(tp, seq, ac))
        predicted = part_time(layer_costs, profile, mb, Execution()).total
        rows.append({"model": shape.name, "tp": tp, "seq": seq, "microbatch": mb, "checkpointing": ac,
                     "measured_ms": measured * 1e3, "predicted_ms": predicted * 1e3,
                     "efficiency": predicted / measured})
        say(f"  layer {shape.name} tp {tp} seq {seq} mb {mb} AC {ac}: measured {measured * 1e3:.2f} ms, kernels "
            f"alone {predicted * 1e3:.2f} ms ({predicted / measured:.0%})")
        del model, stack, x, grad
    return rows


def _name(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]


def measure(dry: bool, say=print) -> dict:
    """Every figure above, on the GPU (or with `dry`, tiny shapes on the CPU)."""
    device = torch.device("cpu" if dry else "cuda")
    started = time.perf_counter()
    name = "cpu (dry run)" if dry else torch.cuda.get_device_name(device)
    dims, extra, seqs = (DRY_DIMS, (), DRY_SEQS) if dry else (GPU_DIMS, GPU_EXTRA, GPU_SEQS)
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        result = {"gpu_name": name, "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
                  "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "dry_run": dry}
        result["kernel_overhead_us"] = launch_overhead(device)
        result["matmul"] = matmuls(device, torch.bfloat16, dims, extra, repeat=3 if dry else 6)
        say(f"matmul bf16: {len(result['matmul'])} shapes, best {max(r['tflops'] for r in result['matmul']):.0f} "
            f"TFLOP/s ({time.perf_counter() - started:.0f} s)")
        result["matmul"] += fp8_matmuls(device, dims, extra, repeat=6)
        result["attention"] = []
        for head_dim in (DRY_HEAD_DIMS if dry else GPU_HEAD_DIMS):
            heads = 4 if dry else 4096 // head_dim
            result["attention"] += attention(device, torch.bfloat16, seqs, 256 if dry else 32768, heads, head_dim,
                                             repeat=3 if dry else 5)
        result["attention_kernel"] = attention_kernel_name(device)
        say(f"attention: {len(result['attention'])} rows, kernel {result['attention_kernel']} "
            f"({time.perf_counter() - started:.0f} s)")
        result["memory"] = memory_bound(device, (2 ** 20,) if dry else (2 ** 27, 2 ** 29, 2 ** 30),
                                        repeat=3 if dry else 8)
        result["layers"] = layers_in_step(device, result, dry, say)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    values = sorted(r["efficiency"] for r in result["layers"])
    result["layer_efficiency"] = values[len(values) // 2]
    result["seconds"] = time.perf_counter() - started
    return result



def summary(result: dict, say=print) -> None:
    for dtype in ("bf16", "fp8"):
        rows = [r for r in result["matmul"] if r["dtype"] == dtype]
        if rows:
            big = max(rows, key=lambda r: r["m"] * r["n"] * r["k"])
            say(f"  matmul {dtype}: {big['tflops']:.0f} TFLOP/s at {big['m']}×{big['n']}×{big['k']}, "
                  f"median {sorted(r['tflops'] for r in rows)[len(rows) // 2]:.0f} over {len(rows)} shapes")
    for r in result["attention"]:
        say(f"  attention seq {r['seq']:>6} head {r['head_dim']:>3} causal={r['causal']!s:5}: forward {r['forward_tflops']:.0f}, "
              f"backward {r['backward_tflops']:.0f} TFLOP/s (counted)")
    mem = [r["gb_per_s"] for r in result["memory"]]
    say(f"  memory-bound: {min(mem):.0f}–{max(mem):.0f} GB/s; launch {result['kernel_overhead_us']:.1f} µs per kernel")
    say(f"  in a step, kernels run at {result['layer_efficiency']:.0%} of their speed alone (median of "
          f"{len(result['layers'])} layer shapes)")
