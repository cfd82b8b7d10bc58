"""The cluster planner against published training runs: every row of the development set
predicted from one hardware profile per kind of GPU (nothing fitted to a row or a model),
predicted against published throughput and memory, and for each scenario (model, GPUs,
global batch) what `--choose` picks.

Sources (fetched and checked):
- torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan): Llama 3.1 on
  H100 96 GB HBM2e at 500 W, 400 Gb/s per GPU, sequence 8192; tokens/s per GPU and memory
  (GiB, the allocator's reserved peak). The 405B rows' 32 sequences per data-parallel rank run
  as torchtitan's default of as many micro-batches as stages (8 of 4); interleaved is taken as
  2 stages per rank.
- Megatron-LM, arXiv 2104.04473 Table 1: GPT models on A100 80 GB (Selene: 8 per node, HDR
  InfiniBand 200 Gb/s per GPU), sequence 2048, vocabulary 51,200, activation recomputation,
  the interleaved schedule with scatter/gather (§5.1); TFLOP/s per GPU with the recomputation
  counted (the paper's formula; torch's counter gives the same). Its fused kernels (layer
  norm, bias+GeLU, bias+dropout+add, scale+mask+softmax) are costed as fused memory-bound
  operators, its attention as two products and a softmax, its data parallelism as an
  all-reduce after backward, without sequence parallelism. The table does not give the
  micro-batch or the chunks per pipeline rank: the planner takes its fastest.

    python benchmarks/published_check.py [--out DIR] [--no-choose]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scaletrain.hardware import load_profile  # noqa: E402
from scaletrain.parallel.dims import ParallelDims  # noqa: E402
from scaletrain.plan.cluster.config import ClusterConfig, ClusterScenario as Scenario, check  # noqa: E402
from scaletrain.plan.cluster.search import Fixed, choose, predict_all  # noqa: E402
from scaletrain.plan.cluster.software import Software  # noqa: E402
from scaletrain.plan.cluster.step import predict  # noqa: E402
from scaletrain.workloads.model_shapes import BUILTIN, megatron_gpt  # noqa: E402

GIB = 2 ** 30


@dataclass
class Row:
    name: str
    scenario: Scenario
    configs: list  # the published configuration (several: the knobs the source leaves open)
    published: float  # tokens/s per GPU, or TFLOP/s per GPU
    unit: str
    memory_gib: float = None
    software: dict = field(default_factory=dict)


def torchtitan_rows() -> list[Row]:
    gpu = load_profile("h100-96g")
    rows = []
    eight = BUILTIN["llama3-8b"]
    table = {8: [("eager", 5762, 82.4), ("compile", 6667, 77.0), ("compile + float8", 8532, 76.8)],
             128: [("eager", 5605, 67.0), ("compile", 6514, 62.0), ("compile + float8", 8380, 61.8)]}
    for gpus, cases in table.items():
        for how, tps, mem in cases:
            soft = {"compile": "compile" in how, "float8": "float8" in how}
            config = ClusterConfig(ParallelDims(dp_shard=gpus), microbatch=2, checkpointing="selective-alternate",
                                   float8=soft["float8"], software=Software(compile=soft["compile"], loss="eager"))
            rows.append(Row(f"torchtitan 8B FSDP {gpus}, {how}", Scenario(eight, gpu, gpus, 8, 8192, 2 * gpus),
                            [config], tps, "tokens/s/GPU", mem, soft))
    soft = {"compile": True, "float8": True}
    seventy = ClusterConfig(ParallelDims(dp_shard=32, tp=8), microbatch=16, checkpointing="full", float8=True,
                            software=Software(compile=True, loss="eager"))
    rows.append(Row("torchtitan 70B FSDP 32 × TP 8, compile + float8", Scenario(BUILTIN["llama3-70b"], gpu, 256, 8,
                                                                                  8192, 512), [seventy], 829,
                    "tokens/s/GPU", 71.9, soft))
    soft = {"compile": True, "float8": True, "async_tp": True}
    for schedule, v, tps, mem in (("1f1b", 1, 100, 82.5), ("interleaved", 2, 128, 72.7)):
        config = ClusterConfig(ParallelDims(dp_shard=8, tp=8, pp=8), microbatch=4, checkpointing="full",
                               schedule=schedule, stages_per_rank=v, float8=True, async_tp=True,
                               software=Software(compile=True, loss="eager"))
        rows.append(Row(f"torchtitan 405B FSDP 8 × TP 8 × PP 8 ({schedule}), compile + float8 + async TP",
                        Scenario(BUILTIN["llama3-405b"], gpu, 512, 8, 8192, 256), [config], tps, "tokens/s/GPU",
                        mem, soft))
    return rows


#: arXiv 2104.04473 Table 1: parameters (B), heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s per GPU.
MEGATRON = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
            (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
            (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
            (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
            (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)]
MEGATRON_SOFTWARE = {"compile": True, "attention": "sdpa-math", "sequence_parallel": False,
                     "overlap_grad_reduce": False}
MEGATRON_SOFT = Software(compile=True, attention="sdpa-math", loss="eager")


def megatron_rows() -> list[Row]:
    gpu = load_profile("a100-80g")
    rows = []
    for params, heads, hidden, layers, tp, pp, gpus, batch, tflops in MEGATRON:
        shape = megatron_gpt(hidden, layers, heads, name=f"gpt-{params:g}b")
        scenario = Scenario(shape, gpu, gpus, 8, 2048, batch)
        dp = gpus // (tp * pp)
        chunks = [v for v in (1, 2, 3, 4) if layers % (pp * v) == 0] if pp > 1 else [1]
        configs = [ClusterConfig(ParallelDims(dp_replicate=dp, tp=tp, pp=pp), microbatch=mb, checkpointing="full",
                                 schedule="interleaved" if v > 1 else "1f1b", stages_per_rank=v, sequence_parallel=False,
                                 overlap_grad_reduce=False, software=MEGATRON_SOFT)
                   for mb in (1, 2, 4, 8) if (batch // dp) % mb == 0 for v in chunks]
        rows.append(Row(f"Megatron-LM {params:g}B TP {tp} × PP {pp}, {gpus} GPUs", scenario, configs, tflops,
                        "TFLOP/s/GPU", None, MEGATRON_SOFTWARE))
    return rows


def evaluate(row: Row, with_choice: bool) -> dict:
    best = None
    for config in row.configs:
        check(config, row.scenario)
        p = predict(config, row.scenario)
        if best is None or p.step_seconds < best.step_seconds:
            best = p
    value = best.tokens_per_second_per_gpu if row.unit.startswith("tokens") else \
        best.hardware_flops_per_step / best.step_seconds / row.scenario.gpus / 1e12
    out = {"name": row.name, "unit": row.unit, "published": row.published, "predicted": value,
           "error": value / row.published - 1, "configuration": best.config.label(), "fits": best.fits,
           "memory_gib": best.memory_bytes / GIB, "published_memory_gib": row.memory_gib,
           "memory_error": (best.memory_bytes / GIB / row.memory_gib - 1) if row.memory_gib else None,
           "tokens_per_second_per_gpu": best.tokens_per_second_per_gpu}
    if with_choice:
        config = row.configs[0]
        options = tuple((name, getattr(config, name)) for name in ("async_tp", "sequence_parallel",
                                                                    "overlap_grad_reduce"))
        fixed = Fixed(float8=config.float8, software=config.software, options=options)
        chosen, _runner_up = choose(predict_all(row.scenario, fixed))
        out["chosen"] = chosen.config.label()
        out["chosen_tokens_per_second_per_gpu"] = chosen.tokens_per_second_per_gpu
        out["chosen_fits"] = chosen.fits
        out["chosen_vs_published_configuration"] = chosen.tokens_per_second_per_gpu / best.tokens_per_second_per_gpu
    return out


def markdown(results: list[dict]) -> str:
    lines = ["| run | unit | published | predicted | error | memory GiB published / predicted | fits | "
             "--choose picks (predicted vs the published configuration) |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for r in results:
        memory = f"{r['published_memory_gib']:.1f} / {r['memory_gib']:.1f} ({r['memory_error']:+.0%})" \
            if r["published_memory_gib"] else f"— / {r['memory_gib']:.1f}"
        chosen = f"{r['chosen']} ({r['chosen_vs_published_configuration']:.2f}×)" if "chosen" in r else ""
        lines.append(f"| {r['name']} | {r['unit']} | {r['published']:,.0f} | {r['predicted']:,.0f} | "
                     f"{r['error']:+.1%} | {memory} | {'yes' if r['fits'] else 'no'} | {chosen} |")
    errors = [abs(r["error"]) for r in results]
    memory = [abs(r["memory_error"]) for r in results if r["memory_error"] is not None]
    lines += ["", f"Throughput: median |error| {statistics.median(errors):.1%}, largest {max(errors):.1%} over "
                  f"{len(errors)} rows. Memory: largest |error| {max(memory):.1%} over {len(memory)} rows."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="also write published_check.md and .json there")
    p.add_argument("--no-choose", action="store_true", help="skip --choose for each scenario (faster)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    results = [evaluate(row, not args.no_choose) for row in torchtitan_rows() + megatron_rows()]
    text = markdown(results)
    print(text)
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "published_check.md").write_text(text)
        (args.out / "published_check.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
