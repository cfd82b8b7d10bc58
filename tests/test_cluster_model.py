"""The cluster planner's modelled terms, each against the first-principles figure it stands for
(no GPU, no process started: traces on the meta device and arithmetic):

- the loss by implementation: an eager `cross_entropy(logits.float())` keeps 6–8 × the bf16
  logits at its peak, a fused or chunked one about 2 × (and the chunked adds one chunk);
- a fused Llama layer keeps 34 bytes × hidden per token (norm inputs and outputs, q, k and v
  grouped, attention output, the MLP's three tensors), the eager one more;
- attention's time from a published rate counts half the score matrix under a causal mask;
- one collective formula for both planners; MFU in PaLM's convention; the allocator's reserve
  as a fraction of the step's own allocations.
"""

from __future__ import annotations

import math

import pytest

from scaletrain.hardware import load_profile
from scaletrain.hardware.kernels import CAUSAL_FRACTION, published_rates
from scaletrain.parallel.dims import ParallelDims
from scaletrain.plan import formulas
from scaletrain.plan.cluster.comm import Network, group
from scaletrain.plan.cluster.compute import activation_bytes, peak_bytes
from scaletrain.plan.cluster.config import ClusterConfig, ClusterScenario
from scaletrain.plan.cluster.flop_conventions import published_flops_per_token
from scaletrain.plan.cluster.loss import CHUNK_ELEMENTS, CHUNK_LIVE_BYTES
from scaletrain.plan.cluster.memory import FRAGMENTATION
from scaletrain.plan.cluster.reference import Layout
from scaletrain.plan.cluster.software import Software
from scaletrain.plan.cluster.step import predict
from scaletrain.plan.cluster.traced import Variant, trace
from scaletrain.workloads.model_shapes import BUILTIN, ModelShape

#: A small Llama with a large vocabulary: the loss's logits dominate its transient.
SMALL = ModelShape("small", "llama", 256, 2, 4, 2, 64, 512, 32768, 4096)
SEQ = 512


def _transient(loss: str) -> float:
    layer, _rest, one = trace(SMALL, Variant(1, SEQ, layout=Layout(loss=loss, kv_expanded=False)))
    return peak_bytes(one, 1) - activation_bytes(layer, 1)


def test_loss_memory_by_implementation():
    logits = SEQ * SMALL.vocab * 2  # one sequence's bf16 logits
    eager, fused = _transient("eager") / logits, _transient("fused") / logits
    assert 5.5 <= eager <= 9.0, eager  # 6 × here (torchtitan's: the bf16 logits not kept), 7 × in Hugging Face's
    assert 1.8 <= fused <= 2.6, fused
    profile = load_profile("h100-sxm-80g")
    scenario = ClusterScenario(SMALL, profile, 1, 1, 2048, 1)
    parts = {loss: predict(ClusterConfig(software=Software(loss=loss)), scenario).memory["transient"]
             for loss in ("fused", "chunked")}
    chunk = CHUNK_ELEMENTS // SMALL.vocab * SMALL.vocab
    assert parts["chunked"] - parts["fused"] == pytest.approx(CHUNK_LIVE_BYTES * chunk)


def test_fused_llama_layer_keeps_34_bytes_per_token_and_hidden():
    shape, seq = BUILTIN["llama3-8b"], 1024
    fused, _, _ = trace(shape, Variant(1, seq, layout=Layout(fused_layers=True, kv_expanded=False, loss="fused")))
    # norm input (2h) and output (2h) twice, q (2h), k and v (2 × 2h/4), attention output (2h),
    # w1, w3 and their product (3 × 2 × 3.5h): 34h bytes a token
    assert activation_bytes(fused, 1) / seq / shape.hidden == pytest.approx(34, abs=0.1)
    eager, _, _ = trace(shape, Variant(1, seq))
    assert activation_bytes(eager, 1) / activation_bytes(fused, 1) > 1.4  # fp32 norm temporaries, copies, K/V


def test_attention_from_a_published_rate_counts_half_the_causal_matrix():
    profile = load_profile("h100-sxm-80g")
    forward, backward = published_rates("sm90", "flash2", True, 128, 8192)
    assert forward == pytest.approx(333) and 3.5 / (1 / forward + 2.5 / backward) == pytest.approx(308, rel=1e-6)
    counted = 4.0 * 8192 ** 2 * 128 * 32  # torch's count: the whole score matrix
    seconds = profile.attention_seconds(counted, 8192, 8192, True, False, 128, "flash2")
    assert seconds == pytest.approx(counted * CAUSAL_FRACTION / (forward * 1e12) + profile.kernel_overhead())


def test_software_names_the_kernel_of_its_time():
    h100, a100 = load_profile("h100-sxm-80g"), load_profile("a100-80g")
    assert Software(torch="2.1").attention_kernel(h100) == "flash1"
    assert Software(torch="2.6").attention_kernel(h100) == "flash2"
    assert Software().attention_kernel(h100) == "calibrated"
    assert Software().attention_kernel(a100) == "flash2"
    assert Software(torch="2.4").kv_expanded(h100) and not Software().kv_expanded(h100)
    assert Software(attention="flash2", torch="2.1").kv_expanded(h100) is False


def test_one_collective_formula_for_both_planners():
    net = Network(load_profile("h100-sxm-80g"))
    g = group(8, 1, 8)
    step = net.nvlink_latency / 4
    assert net.all_gather(1e9, g) == formulas.ring_all_gather_seconds(1e9, 8, net.nvlink, step)
    across = group(64, 1, 8)
    assert net.all_reduce(1e9, across) == min(
        formulas.ring_all_reduce_seconds(1e9, 64, net.busbw(across, True), net.net_latency / 2),
        formulas.tree_all_reduce_seconds(1e9, 64, net.busbw(across, True), net.net_latency))


def test_mfu_in_both_conventions():
    shape = BUILTIN["llama3-8b"]
    per_token = published_flops_per_token(shape, 8192)
    n = shape.parameters - shape.vocab * shape.hidden  # without the input embedding
    assert per_token == 6 * n + 12 * 32 * 4096 * 8192
    profile = load_profile("h100-sxm-80g")
    p = predict(ClusterConfig(ParallelDims(dp_shard=8), checkpointing="full"),
                ClusterScenario(shape, profile, 8, 8, 8192, 8))
    assert p.mfu_published == pytest.approx(per_token * p.tokens_per_second_per_gpu / profile.peak("bf16"))
    assert 0.2 < p.mfu_published < p.mfu < 0.8  # torch counts the whole causal score matrix and its backward 2.5×


def test_allocator_reserve_is_a_fraction_of_the_step_allocations():
    p = predict(ClusterConfig(ParallelDims(dp_shard=8), checkpointing="full"),
                ClusterScenario(BUILTIN["llama3-8b"], load_profile("h100-sxm-80g"), 8, 8, 8192, 8))
    m = p.memory
    assert m["allocator"] == pytest.approx(FRAGMENTATION * (m["activations"] + m["transient"] + m["gathered_blocks"]))
    assert p.fits and math.isclose(p.memory_bytes, sum(m.values()))


def test_small_micro_batches_expose_fsdp_communication():
    """FSDP's per-layer gathers and reductions do not shrink with the micro-batch: at a short
    sequence and few GPUs per node of fast compute, what does not hide grows."""
    profile = load_profile("h100-sxm-80g")
    exposed = []
    for mb in (1, 8):
        scenario = ClusterScenario(BUILTIN["llama3-70b"], profile, 64, 8, 1024, 64 * mb)
        p = predict(ClusterConfig(ParallelDims(dp_shard=64), microbatch=mb, checkpointing="full"), scenario)
        exposed.append(p.comm["data_parallel_exposed_s"] / p.step_seconds)
    assert exposed[0] > 2 * exposed[1]
