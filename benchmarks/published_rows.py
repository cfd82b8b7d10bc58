"""The cluster planner's development set: published training runs, each as its source states
it — model, GPUs, layout, micro-batch, activation checkpointing, precision and the software it
ran (torch's version, attention kernel, loss, compiled or eager) — and its published
throughput and memory. Nothing here is fitted: a row names what its source says, and where the
source leaves something open the row says what was taken (`note`).

Sources (each fetched and read; commit in the row's source line):
- torchtitan, benchmarks/llama3_h100_202412_torchtitan.md @ 820504e (Dec 2024): Llama 3.1 on
  H100 96 GB HBM2e at 500 W, 400 Gb/s per GPU; Tables 1–6 (FSDP, FSDP × CP to 256k tokens,
  2D, 3D and 4D with float8, torch.compile, async TP), torch 1963fc8 (2.6 nightly): attention
  SDPA's FlashAttention-2 (cuDNN's had become opt-in, pytorch/pytorch#138522), keys and values
  expanded (repeat_kv), `cross_entropy(logits.float())`, context parallel's keys and values
  all-gathered (its default rotate method then);
- torchtitan, benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (June 2025, torch
  38410cf9, 2.8 nightly): Llama 3.1 70B FSDP 32 × TP 8 in bf16, with and without async TP;
- Trainy on H200 (torchtitan benchmarks/, June 2025, NGC 25.05's torch 2.8a): Llama 3.1 8B,
  FSDP 32 and 64, float8, compiled, selective ("op") checkpointing;
- torchtitan, docs/performance.md @ 1ea476e (April 2024): Llama 3 and 2 with FSDP2 on 64 A100
  80 GB, eager, torch nightly (2.4), Triton fused RMSNorm in the 8B/13B configs;
- IBM and Meta's fms-fsdp README @ 4ffb9bd (March 2024, eager) and @ ed74fd5 (May 2024,
  compiled): Llama 2 7B–70B with FSDP1 on 128 A100 80 GB ("400 Gbps") and 96 H100 80 GB
  ("800 Gbps"), micro-batch 2, SDPA's FlashAttention-2, bf16 reduction (FSDP1's mixed
  precision); the links are taken per node (the README does not say);
- Dao-AILab/flash-attention, training/README.md (Nov 2022): GPT-3 1.3B and 2.7B on 8 A100 80 GB
  with FlashAttention (v1), fused dense, MLP, dropout-add-LayerNorm and cross-entropy kernels,
  DDP with ZeRO-1, no checkpointing; micro-batch from its configs' rule for 80 GB;
- BigScience BLOOM-176B, train/tr11-176B-ml/README.md: TP 4 × PP 12 × DP 8 on 384 A100 80 GB
  (4 Omni-Path links per node), full activation checkpointing, Megatron-DeepSpeed's fused
  kernels, no flash attention; one logged iteration of 104.70 s at 2,048 × 2,048 tokens;
- Megatron-LM, arXiv 2104.04473 Table 1: GPT 1.7B–1T on A100 80 GB (Selene), sequence 2048,
  full recomputation, interleaved schedule; TFLOP/s per GPU with the recomputation counted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scaletrain.hardware import load_profile
from scaletrain.parallel.dims import ParallelDims
from scaletrain.plan.cluster.config import ClusterConfig, ClusterScenario
from scaletrain.plan.cluster.software import Software
from scaletrain.workloads.model_shapes import BUILTIN, ModelShape, megatron_gpt

TOKENS = "tokens/s/GPU"
HARDWARE_TFLOPS = "TFLOP/s/GPU"


@dataclass
class Row:
    name: str
    source: str
    scenario: ClusterScenario
    configs: list  # the published configuration (several: the knobs the source leaves open; the fastest is taken)
    published: float
    unit: str
    memory_gib: float = None
    note: str = ""

    @property
    def seq(self) -> int:
        return self.scenario.seq


def llama(name, layers, hidden, heads, kv_heads, ffn, vocab, positions=131072) -> ModelShape:
    return ModelShape(name, "llama", hidden, layers, heads, kv_heads, hidden // heads, ffn, vocab, positions)


def with_network(profile, gbit_per_gpu: float):
    return dataclasses.replace(profile, links={**profile.links, "network_gbit_per_s": gbit_per_gpu})


def _config(software: Software, **settings) -> ClusterConfig:
    dims = ParallelDims(**{k: settings.pop(k) for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp") if k in settings})
    return ClusterConfig(dims, software=software, **settings)


TT_DEC24 = Software(torch="2.6", loss="eager", gqa="expanded", layer_kernels="eager")
TT_SOURCE = "torchtitan Dec 2024 (H100 96 GB, 500 W)"


def torchtitan_dec2024() -> list[Row]:
    gpu, rows = load_profile("h100-96g"), []
    s8, s70, s405 = BUILTIN["llama3-8b"], BUILTIN["llama3-70b"], BUILTIN["llama3-405b"]
    for gpus, table in ((8, [("eager", 5762, 82.4), ("compile", 6667, 77.0), ("compile + float8", 8532, 76.8)]),
                        (128, [("eager", 5605, 67.0), ("compile", 6514, 62.0), ("compile + float8", 8380, 61.8)])):
        for how, tps, mem in table:
            soft = dataclasses.replace(TT_DEC24, compile="compile" in how)
            config = _config(soft, dp_shard=gpus, microbatch=2, checkpointing="selective-alternate",
                             float8="float8" in how)
            rows.append(Row(f"8B FSDP {gpus}, {how}", TT_SOURCE, ClusterScenario(s8, gpu, gpus, 8, 8192, 2 * gpus),
                            [config], tps, TOKENS, mem))
    soft = dataclasses.replace(TT_DEC24, compile=True)
    for async_tp, tps, mem in ((False, 829, 71.9), (True, 876, 67.6)):
        config = _config(soft, dp_shard=32, tp=8, microbatch=16, checkpointing="full", float8=True, async_tp=async_tp)
        rows.append(Row(f"70B FSDP 32 × TP 8, compile + float8{' + async TP' if async_tp else ''}", TT_SOURCE,
                        ClusterScenario(s70, gpu, 256, 8, 8192, 512), [config], tps, TOKENS, mem))
    for schedule, v, tps, mem in (("1f1b", 1, 100, 82.5), ("interleaved", 2, 128, 72.7)):
        config = _config(soft, dp_shard=8, tp=8, pp=8, microbatch=4, checkpointing="full", schedule=schedule,
                         stages_per_rank=v, float8=True, async_tp=True)
        rows.append(Row(f"405B FSDP 8 × TP 8 × PP 8 ({schedule}), compile + float8 + async TP", TT_SOURCE,
                        ClusterScenario(s405, gpu, 512, 8, 8192, 256), [config], tps, TOKENS, mem,
                        "32 sequences per data-parallel rank in torchtitan's default of 8 micro-batches; "
                        "interleaved taken as 2 stages per rank"))
    for shard, cp, seq, tps, mem in ((8, 1, 32768, 3890, 83.9), (4, 2, 65536, 2540, 84.2), (2, 4, 131072, 1071, 84.0),
                                     (1, 8, 262144, 548, 84.5)):
        config = _config(soft, dp_shard=shard, cp=cp, microbatch=1, checkpointing="full", float8=True,
                         cp_rotate="allgather")
        rows.append(Row(f"8B FSDP {shard} × CP {cp}, seq {seq // 1024}k, compile + float8", TT_SOURCE,
                        ClusterScenario(s8, gpu, 8, 8, seq, shard), [config], tps, TOKENS, mem))
    for shard, cp, seq, tps, mem in ((8, 1, 32768, 76, 75.3), (4, 2, 65536, 47, 75.9), (2, 4, 131072, 31, 77.1),
                                     (1, 8, 262144, 16, 84.9)):
        config = _config(soft, dp_shard=shard, tp=8, pp=8, cp=cp, microbatch=1, checkpointing="full", float8=True,
                         async_tp=True, cp_rotate="allgather")
        rows.append(Row(f"405B FSDP {shard} × TP 8 × PP 8 × CP {cp}, seq {seq // 1024}k", TT_SOURCE,
                        ClusterScenario(s405, gpu, 512, 8, seq, 8 * shard), [config], tps, TOKENS, mem,
                        "local batch 8 in torchtitan's default of 8 micro-batches (1 sequence each)"))
    return rows


def torchtitan_2025() -> list[Row]:
    rows = []
    # torchtitan compiles the loss with the model from February 2025 (build_cross_entropy_loss):
    # inductor fuses the upcast into the cross-entropy's kernels, as a fused loss
    soft = Software(torch="2.8", loss="fused", gqa="expanded", compile=True, layer_kernels="eager")
    gpu = load_profile("h100-96g")
    for async_tp, tps in ((False, 597.3), (True, 652.4)):
        config = _config(soft, dp_shard=32, tp=8, microbatch=16, checkpointing="full", async_tp=async_tp)
        rows.append(Row(f"70B FSDP 32 × TP 8, bf16, compile{' + async TP' if async_tp else ''}",
                        "torchtitan June 2025 (H100 96 GB, 500 W)",
                        ClusterScenario(BUILTIN["llama3-70b"], gpu, 256, 8, 8192, 512), [config], tps, TOKENS))
    h200 = load_profile("h200")
    for gpus, tps, mem in ((32, 10938, 47.96), (64, 10753, 46.97)):
        config = _config(soft, dp_shard=gpus, microbatch=2, checkpointing="selective-alternate", float8=True)
        rows.append(Row(f"8B FSDP {gpus}, compile + float8", "Trainy June 2025 (H200)",
                        ClusterScenario(BUILTIN["llama3-8b"], h200, gpus, 8, 8192, 2 * gpus), [config], tps, TOKENS,
                        mem, "sequence 8192 and op-policy checkpointing from the torchtitan config it names"))
    return rows


def torchtitan_apr2024() -> list[Row]:
    gpu, source, rows = load_profile("a100-80g"), "torchtitan April 2024 (A100 80 GB)", []
    fused = Software(torch="2.4", loss="eager", gqa="expanded", layer_kernels="norms")  # Triton fused RMSNorm
    eager = dataclasses.replace(fused, layer_kernels="eager")
    llama2_13b = llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096)
    for name, shape, seq, mb, ac, soft, wps in (
            ("Llama 3 8B, mb 1, AC selective (op)", BUILTIN["llama3-8b"], 8192, 1, "selective-alternate", fused, 2973),
            ("Llama 3 70B, mb 1, AC full", BUILTIN["llama3-70b"], 8192, 1, "full", eager, 331),
            ("Llama 2 13B, mb 2, AC none", llama2_13b, 4096, 2, "none", fused, 2162),
            ("Llama 2 13B, mb 2, AC selective (op)", llama2_13b, 4096, 2, "selective-alternate", fused, 1904)):
        config = _config(soft, dp_shard=64, microbatch=mb, checkpointing=ac)
        rows.append(Row(f"{name}, FSDP 64", source, ClusterScenario(shape, gpu, 64, 8, seq, 64 * mb), [config], wps,
                        TOKENS, note="network not stated: the a100-80g profile's (200 Gb/s per GPU)"))
    return rows


def fms_fsdp() -> list[Row]:
    a100 = with_network(load_profile("a100-80g"), 400 / 8)
    h100 = with_network(load_profile("h100-sxm-80g"), 800 / 8)
    llama2_7b = llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096)
    shapes = {"7B": llama2_7b, "34B": llama("fms-34b", 48, 8192, 64, 8, 22016, 32000, 4096),
              "70B": llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096)}
    rows = []
    for compiled, model, ac, a100_tps, h100_tps in ((True, "7B", "none", 4550, 9600), (False, "7B", "none", 3700, 7500),
                                                    (False, "34B", "full", 700, 1550), (False, "70B", "full", 370, 800)):
        soft = Software(torch="2.3", loss="eager", reduce_dtype="bf16", compile=compiled, layer_kernels="eager")
        for gpu, gpus, tps in ((a100, 128, a100_tps), (h100, 96, h100_tps)):
            layout = dict(dp_shard=8, dp_replicate=gpus // 8) if model == "7B" else dict(dp_shard=gpus)
            config = _config(soft, microbatch=2, checkpointing=ac, **layout)
            kind = "A100" if gpu is a100 else "H100"
            rows.append(Row(f"{model} {'HSDP' if model == '7B' else 'FSDP'} {gpus} {kind}, AC {ac}, "
                            f"{'compile' if compiled else 'eager'}", f"fms-fsdp {'May' if compiled else 'March'} 2024",
                            ClusterScenario(shapes[model], gpu, gpus, 8, 4096, 2 * gpus), [config], tps, TOKENS,
                            note="the README's network taken per node"))
    return rows


def flash_attention_training() -> list[Row]:
    gpu, rows = load_profile("a100-80g"), []
    soft = Software(torch="1.13", attention="flash1", loss="fused", layer_kernels="fused")
    for name, hidden, layers, heads, mb, tps in (("GPT-3 1.3B", 2048, 24, 16, 8, 169000 / 8),
                                                 ("GPT-3 2.7B (head size 128)", 2560, 32, 20, 4, 85000 / 8)):
        shape = dataclasses.replace(megatron_gpt(hidden, layers, heads, vocab=50264, name=name), dropout=0.0)
        config = _config(soft, dp_replicate=8, microbatch=mb, checkpointing="none", optimizer_sharded=True)
        rows.append(Row(f"{name}, DDP 8, mb {mb}", "flash-attention training Nov 2022 (A100 80 GB)",
                        ClusterScenario(shape, gpu, 8, 8, 2048, 512), [config], tps, TOKENS))
    return rows


def bloom() -> list[Row]:
    gpu = with_network(load_profile("a100-80g"), 4 * 100 / 8)  # 4 Omni-Path links of 100 Gb/s per node
    shape = dataclasses.replace(megatron_gpt(14336, 70, 112, vocab=250880, name="bloom-176b"), learned_positions=False,
                                dropout=0.0)
    soft = Software(torch="1.11", attention="sdpa-math", loss="eager", compile=True)  # Megatron's fused kernels
    config = _config(soft, dp_replicate=8, tp=4, pp=12, microbatch=2, checkpointing="full", sequence_parallel=False,
                     overlap_grad_reduce=False, optimizer_sharded=True)  # its bf16 optimizer: ZeRO-1
    return [Row("BLOOM 176B TP 4 × PP 12 × DP 8, AC full", "BLOOM 2022 (A100 80 GB)",
                ClusterScenario(shape, gpu, 384, 8, 2048, 2048), [config], 2048 * 2048 / 104.70 / 384, TOKENS,
                note="one logged iteration (104.70 s)")]


#: arXiv 2104.04473 Table 1: parameters (B), heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s per GPU.
MEGATRON = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
            (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
            (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
            (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
            (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)]
#: Megatron-LM's own kernels (fused layer norm, bias+GeLU, bias+dropout+add, scale+mask+softmax),
#: attention as two products and a softmax, gradients all-reduced after backward.
MEGATRON_SOFTWARE = Software(torch="1.8", attention="sdpa-math", loss="eager", compile=True)


def megatron_2021() -> list[Row]:
    gpu, rows = load_profile("a100-80g"), []
    for params, heads, hidden, layers, tp, pp, gpus, batch, tflops in MEGATRON:
        shape = megatron_gpt(hidden, layers, heads, name=f"gpt-{params:g}b")
        dp = gpus // (tp * pp)
        chunks = [v for v in (1, 2, 3, 4) if layers % (pp * v) == 0] if pp > 1 else [1]
        configs = [_config(MEGATRON_SOFTWARE, dp_replicate=dp, tp=tp, pp=pp, microbatch=mb, checkpointing="full",
                           schedule="interleaved" if v > 1 else "1f1b", stages_per_rank=v, sequence_parallel=False,
                           overlap_grad_reduce=False)
                   for mb in (1, 2, 4, 8) if (batch // dp) % mb == 0 for v in chunks]
        rows.append(Row(f"GPT {params:g}B TP {tp} × PP {pp}, {gpus} GPUs", "Megatron-LM 2021 (A100 80 GB)",
                        ClusterScenario(shape, gpu, gpus, 8, 2048, batch), configs, tflops, HARDWARE_TFLOPS,
                        note="micro-batch and chunks per rank not in the table: the fastest predicted"))
    return rows


def development_set() -> list[Row]:
    return (torchtitan_dec2024() + torchtitan_2025() + torchtitan_apr2024() + fms_fsdp() + flash_attention_training()
            + bloom() + megatron_2021())

