"""torch 2.11's attention FLOP formulas, installed into this process's torch (2.13 here), so
that the suite sees what a run on torch 2.11 sees: before 2.12, `sdpa_flop_count` and
`sdpa_backward_flop_count` in `torch.utils.flop_counter` assert that queries, keys and values
have the same number of heads, which grouped-query attention does not (torch 2.12 accepted it).

`install()` replaces the two functions (the CUDA operators' registry entries look them up at
call time) and registers them for the CPU's flash attention too, whose missing formula a
counter would otherwise skip. A child process gets them through `sitecustomize_dir()`: a
folder whose sitecustomize.py installs them at start-up, to put first on its PYTHONPATH.

The rule below is 2.11's check (torch/utils/flop_counter.py of 2.11.0, lines 281-297 and
492-501), its count written out; a test of 2.11's behaviour, not a copy of torch.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.utils.flop_counter as flop_counter

aten = torch.ops.aten


def sdpa_flop_count(query_shape, key_shape, value_shape):
    b, h, s_q, d_q = query_shape
    _b2, _h2, s_k, _d2 = key_shape
    _b3, _h3, _s3, d_v = value_shape
    if not b == _b2 == _b3 or not h == _h2 == _h3 or not d_q == _d2 or not s_k == _s3:
        raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")
    return 2 * b * h * s_q * s_k * d_q + 2 * b * h * s_q * s_k * d_v


def sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape):
    b, h, s_q, d_q = query_shape
    _b2, _h2, s_k, _d2 = key_shape
    _b3, _h3, _s3, d_v = value_shape
    _b4, _h4, _s4, _d4 = grad_out_shape
    if not b == _b2 == _b3 == _b4 or not h == _h2 == _h3 == _h4 or not d_q == _d2:
        raise AssertionError("sdpa_backward_flop_count: batch/heads/dimension mismatch among tensors")
    return 2 * b * h * s_q * s_k * (3 * d_q + 2 * d_v)


def _cpu_forward(q, k, v, *args, **kwargs):
    return sdpa_flop_count(q, k, v)


def _cpu_backward(grad_out, q, k, v, *args, **kwargs):
    return sdpa_backward_flop_count(grad_out, q, k, v)


def install(setattr_=setattr, setitem=None) -> None:
    """2.11's formulas into torch.utils.flop_counter. `setattr_`, `setitem`: a test's
    monkeypatch.setattr / setitem, so that they are undone after it."""
    setitem = setitem or (lambda mapping, key, value: mapping.__setitem__(key, value))
    setattr_(flop_counter, "sdpa_flop_count", sdpa_flop_count)
    setattr_(flop_counter, "sdpa_backward_flop_count", sdpa_backward_flop_count)
    setitem(flop_counter.flop_registry, aten._scaled_dot_product_flash_attention_for_cpu,
            flop_counter.shape_wrapper(_cpu_forward))
    setitem(flop_counter.flop_registry, aten._scaled_dot_product_flash_attention_for_cpu_backward,
            flop_counter.shape_wrapper(_cpu_backward))


def sitecustomize_dir(folder: Path) -> Path:
    """A folder whose sitecustomize.py installs 2.11's formulas in any Python started with it
    first on PYTHONPATH (the repository must be on the path too)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text("from tests.torch_2_11_flops import install\ninstall()\n")
    return folder
