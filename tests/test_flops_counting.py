"""FLOP counting that is right on every torch the package accepts and never fails a run:

- attention (every fused SDPA operator, forward and backward, the CPU's flash included) is
  counted by scaletrain's own formula, the same numbers with torch 2.11's formulas installed
  (which assert on grouped-query attention) as with 2.13's;
- a formula that fails leaves its operator uncounted, the step runs on, and the run's
  summary says MFU is partial and why;
- a grouped-query Llama (fewer key/value heads than query heads, as Llama 3, Mistral, Qwen)
  trains from `scaletrain train --model-config` with torch 2.11's formulas in force.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from tests import torch_2_11_flops
from tests.helpers import scaletrain, test_env

aten = torch.ops.aten
B, HQ, HKV, S, D = 2, 4, 2, 16, 8


def _gqa(device="cpu", requires_grad=False):
    make = lambda heads: torch.randn(B, heads, S, D, device=device, requires_grad=requires_grad)  # noqa: E731
    return make(HQ), make(HKV), make(HKV)


@pytest.fixture
def torch_2_11(monkeypatch):
    torch_2_11_flops.install(monkeypatch.setattr, monkeypatch.setitem)
    # the name an older scaletrain bound at import, where it delegated to torch's formula
    import scaletrain.flops.trace as trace

    monkeypatch.setattr(trace, "sdpa_flop_count", torch_2_11_flops.sdpa_flop_count, raising=False)
    monkeypatch.setattr(trace, "sdpa_backward_flop_count", torch_2_11_flops.sdpa_backward_flop_count, raising=False)


def test_torch_2_11_formula_reproduced():
    """The reproduction is faithful: 2.11's rule refuses grouped-query shapes, accepts equal heads."""
    with pytest.raises(AssertionError, match="shapes are incompatible"):
        torch_2_11_flops.sdpa_flop_count((B, HQ, S, D), (B, HKV, S, D), (B, HKV, S, D))
    assert torch_2_11_flops.sdpa_flop_count((B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D)) == \
        torch.utils.flop_counter.sdpa_flop_count((B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D))


def test_gqa_attention_on_the_cpu_counted_under_torch_2_11(torch_2_11):
    from scaletrain.flops import TraceMode
    from scaletrain.flops.attention import attention_backward_flops, attention_flops

    q, k, v = _gqa(requires_grad=True)
    with TraceMode() as mode:
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
    assert not mode.trace.uncounted
    assert mode.trace.forward_flops == attention_flops(B, HQ, S, S, D, D) == 2 * B * HQ * S * S * 2 * D
    assert mode.trace.backward_flops == attention_backward_flops(B, HQ, S, S, D, D)


OPERATORS = [  # (operator, its arguments for grouped-query shapes: (B, H, S, D), or (B, S, H, D) below SDPA)
    ("_scaled_dot_product_flash_attention", lambda q, k, v, g: (q, k, v, 0.0, True)),
    ("_scaled_dot_product_efficient_attention", lambda q, k, v, g: (q, k, v, None, True, 0.0, True)),
    ("_scaled_dot_product_cudnn_attention", lambda q, k, v, g: (q, k, v, None, True, 0.0, True, False)),
    ("_scaled_dot_product_flash_attention_for_cpu", lambda q, k, v, g: (q, k, v, 0.0, True)),
    ("_scaled_dot_product_fused_attention_overrideable", lambda q, k, v, g: (q, k, v, None)),
    ("_scaled_dot_product_flash_attention_backward", lambda q, k, v, g: (g, q, k, v, g, None)),
    ("_scaled_dot_product_efficient_attention_backward", lambda q, k, v, g: (g, q, k, v, None, g, None)),
    ("_scaled_dot_product_cudnn_attention_backward", lambda q, k, v, g: (g, q, k, v, g, None)),
    ("_scaled_dot_product_flash_attention_for_cpu_backward", lambda q, k, v, g: (g, q, k, v, g, None)),
    ("_scaled_dot_product_fused_attention_overrideable_backward", lambda q, k, v, g: (g, q, k, v, None)),
    ("_flash_attention_forward", lambda q, k, v, g: _bshd(q, k, v) + (None, None, S, S)),
    ("_efficient_attention_forward", lambda q, k, v, g: _bshd(q, k, v) + (None, None, None, S, S)),
    ("_flash_attention_backward", lambda q, k, v, g: (_bshd(g)[0], *_bshd(q, k, v), None, None, None, None, S, S)),
    ("_efficient_attention_backward", lambda q, k, v, g: (_bshd(g)[0], *_bshd(q, k, v), None, None, None, None, S, S)),
]


def _bshd(*tensors):
    return tuple(t.transpose(1, 2) for t in tensors)


@pytest.mark.parametrize("name,arguments", OPERATORS, ids=[name for name, _ in OPERATORS])
def test_every_attention_operator_counted_alike_under_torch_2_11(torch_2_11, name, arguments):
    """Every backend's operator, forward and backward, counted by scaletrain's formula (what the
    GPU's kernels run: flash, memory-efficient, cuDNN; shapes on the meta device)."""
    from scaletrain.flops.attention import attention_backward_flops, attention_flops
    from scaletrain.flops.trace import op_flops

    if not hasattr(aten, name):
        pytest.skip(f"this torch has no aten.{name}")
    q, k, v = _gqa("meta")
    grad = torch.empty_like(q)
    expected = (attention_backward_flops if name.endswith("_backward") else attention_flops)(B, HQ, S, S, D, D)
    assert op_flops(getattr(aten, name).default, arguments(q, k, v, grad), {}, None) == expected


def test_packed_sequences_counted_one_by_one():
    from scaletrain.flops.attention import attention_flops
    from scaletrain.flops.trace import op_flops

    lengths = torch.tensor([0, 5, 16])  # two packed sequences of 5 and 11 tokens
    q, k, v = (torch.empty(16, heads, D) for heads in (HQ, HKV, HKV))
    flops = op_flops(aten._flash_attention_forward.default, (q, k, v, lengths, lengths, 11, 11), {}, None)
    assert flops == attention_flops(1, HQ, 5, 5, D, D) + attention_flops(1, HQ, 11, 11, D, D)


def test_a_failing_formula_leaves_its_operator_uncounted(monkeypatch, tmp_path):
    """A formula that raises: the step runs, the operator counts 0, and the summary says MFU
    is partial and why."""
    from torch.utils.flop_counter import flop_registry

    from scaletrain.flops import TraceMode
    from scaletrain.train.config import TrainConfig
    from scaletrain.train.loop import train

    def broken(*args, **kwargs):
        raise AssertionError("a formula that fails")

    monkeypatch.setitem(flop_registry, aten.addmm, broken)
    layer = torch.nn.Linear(8, 8)
    with TraceMode() as mode:
        layer(torch.randn(4, 8)).sum().backward()
    assert "a formula that fails" in mode.trace.uncounted["aten.addmm"]
    assert mode.trace.backward_flops > 0  # the backward's mm still counted

    summary = train(TrainConfig(strategy="single", workload="synthetic-mlp", max_steps=3, pin_cores=False),
                    tmp_path / "run")
    assert summary["model_flops_per_step"] > 0 and summary["mfu"] is not None
    assert "MFU is partial" in summary["mfu_note"] and "aten.addmm" in summary["mfu_note"], summary


GQA_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
             "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 256}


def test_gqa_llama_trains_from_the_command_line_under_torch_2_11(tmp_path):
    """`scaletrain train --model-config` of a grouped-query Llama, in a process whose torch has
    2.11's formulas: it trains, and its MFU is counted whole (attention included)."""
    config = tmp_path / "llama-gqa.json"
    config.write_text(json.dumps(GQA_LLAMA))
    site = torch_2_11_flops.sitecustomize_dir(tmp_path / "torch-2.11")
    env = test_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    done = scaletrain("train", "--model-config", str(config), "--seq-len", "32", "--batch-size", "2",
                      "--max-steps", "3", "--strategy", "single", "--no-pin-cores", "--out", str(tmp_path / "run"),
                      env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["model_flops_per_step"] > 0 and "mfu_note" not in summary, summary
