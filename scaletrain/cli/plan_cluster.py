"""`scaletrain plan --hardware NAME|FILE`: predict a GPU cluster this machine is not, from a
hardware profile and a model's shape — no GPU, no measurement, seconds on a laptop.

    scaletrain plan --hardware h100-sxm-80g --gpus 64 --model-config llama3-8b \\
        --seq-len 8192 --global-batch 256 --choose
    scaletrain plan --hardware h100-sxm-80g --gpus 64 --model-config mixtral-8x7b \\
        --seq-len 4096 --global-batch 512 --choose        # a mixture of experts: --ep searched
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from .parsing import positive_int

CLUSTER_SEQ_LEN = 8192  # --seq-len's default with --hardware


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """The flags only a cluster plan reads (--tp, --pp, --dp-shard, --dp-replicate, --cp, --ep,
    --seq-len, --choose, --json, --out and --strategy are plan's own and mean the same here)."""
    g = p.add_argument_group("a GPU cluster (with --hardware: predicted from a hardware profile, nothing measured; "
                                 "the degrees not given, --cp for long sequences among them, are searched)")
    g.add_argument("--hardware", metavar="NAME|FILE",
                   help="plan for GPUs of this kind: a100-80g, h100-sxm-80g, h100-96g, h200, or a profile .toml")
    g.add_argument("--gpus", type=positive_int, metavar="N", help="GPUs in all (default: one node's)")
    g.add_argument("--gpus-per-node", type=positive_int, metavar="G", help="GPUs per node (default: the profile's)")
    g.add_argument("--model-config", metavar="NAME|FILE",
                   help="llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b, or a transformers config.json "
                        "(decoder-only; Mixtral and Qwen3-MoE mixtures of experts too)")
    g.add_argument("--global-batch", type=positive_int, metavar="B", help="sequences per optimizer step (default: 2 per GPU)")
    g.add_argument("--micro-batch", type=positive_int, metavar="M", help="sequences per forward on one GPU (default: searched)")
    g.add_argument("--activation-checkpointing", choices=["none", "selective", "full"],
                   help="default: each is predicted")
    g.add_argument("--schedule", choices=["1f1b", "interleaved"], help="pipeline schedule (default: both)")
    g.add_argument("--float8", action="store_true", help="float8 linear layers (GPUs with fp8 tensor cores)")
    g.add_argument("--expert-load", type=_load, metavar="L",
                   help="a mixture of experts under expert parallel: the busiest GPU's routed rows over the mean "
                        "(default 1.0: balanced routing; a run's expert_load_max_over_mean in summary.json bounds it)")
    add_software_arguments(p)


def _load(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value >= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: the busiest GPU's rows over the mean, 1.0 (balanced) or more")
    return value


def add_software_arguments(p: argparse.ArgumentParser) -> None:
    """The software the planned run uses (default: what `scaletrain train` runs on that GPU)."""
    from ..plan.cluster.software import ATTENTION, GQA, LAYER_KERNELS, LOSS, REDUCE_DTYPES

    g = p.add_argument_group("the software of the planned run (with --hardware; default: scaletrain's own on that GPU: "
                             "today's torch, SDPA's attention, a chunked cross-entropy, eager)")
    g.add_argument("--torch", metavar="VERSION",
                   help="torch's version, MAJOR.MINOR (default: the one the profile's calibration measured): which "
                        "kernel scaled_dot_product_attention runs (FlashAttention before 2.2, FlashAttention-2 from "
                        "2.2, cuDNN's on Hopper from 2.10) and whether it takes grouped keys and values (2.5)")
    g.add_argument("--attention", choices=ATTENTION,
                   help="the attention kernel: sdpa (default: the one torch's scaled_dot_product_attention picks), "
                        "flash1, flash2, flash3 (Hopper), cudnn (Hopper), triton, or sdpa-math (two products and a "
                        "softmax)")
    g.add_argument("--loss", choices=LOSS,
                   help="the cross-entropy: chunked (default: scaletrain's, a chunk of tokens at a time), fused (one "
                        "kernel on the bf16 logits), eager (cross_entropy(logits.float()))")
    g.add_argument("--compile", action="store_true", help="torch.compile: the blocks' memory-bound operators fused")
    g.add_argument("--layer-kernels", choices=LAYER_KERNELS,
                   help="norms (default: RMSNorm by torch's fused kernel, the rest eager, scaletrain's own), eager (norms, "
                        "rotary embeddings and SwiGLU as torch operators) or fused (all three as fused kernels)")
    g.add_argument("--gqa", choices=GQA,
                   help="grouped-query attention's keys and values: given to the kernel grouped (native) or "
                        "expanded to every head (default: what the attention kernel does)")
    g.add_argument("--reduce-dtype", choices=REDUCE_DTYPES,
                   help="the dtype gradients are reduced in (default fp32; FSDP1's mixed precision reduced in bf16)")


def cluster_request(args: argparse.Namespace):
    """The cluster plan the flags ask for."""
    from ..plan.cluster import ClusterRequest
    from ..plan.cluster.search import Fixed
    from ..plan.cluster.software import software_of

    software = software_of(args.torch, args.attention, args.loss, args.compile, args.layer_kernels, args.gqa,
                           args.reduce_dtype)
    fixed = Fixed(strategy=_strategy(args.strategy), tp=args.tp, pp=args.pp, cp=args.cp, dp_shard=args.dp_shard,
                  dp_replicate=args.dp_replicate, ep=getattr(args, "ep", None), microbatch=args.micro_batch,
                  checkpointing=args.activation_checkpointing, schedule=args.schedule, float8=args.float8,
                  software=software,
                  options=(("expert_load", args.expert_load),) if args.expert_load is not None else ())
    return ClusterRequest(args.hardware, args.model_config, args.gpus, args.gpus_per_node, args.seq_len or CLUSTER_SEQ_LEN,
                          args.global_batch, fixed)


def show_cluster(plan, choose: bool, as_json: bool, out) -> int:
    """Prints the cluster plan (as JSON with `as_json`), and writes it and its chart to `out`."""
    from ..plan.cluster import report

    result = plan.as_dict()
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
        report.plot(plan.predictions, plan.scenario, Path(out).with_suffix(".png"))
    if as_json:
        print(json.dumps(result, indent=1))
        return 0
    _print(plan.predictions, plan.scenario, plan.best, plan.runner_up, choose, out)
    return 0


def _strategy(text) -> str | None:
    """--strategy's layout; None for the flag's default (every plannable strategy: the layout is searched)."""
    from ..strategies import REGISTRY

    if not text or text == ",".join(name for name, cls in REGISTRY.items() if cls.plannable):  # the default
        return None
    return text


def _print(predictions, scenario, best, runner_up, choose: bool, out) -> None:
    from ..plan.cluster import report
    from ..plan.cluster.software import Software

    p = scenario.profile
    print(f"{scenario.shape.name} ({scenario.shape.parameters / 1e9:.1f} B parameters) on {scenario.gpus} × "
          f"{p.name} ({scenario.gpus_per_node} per node), seq {scenario.seq}, global batch {scenario.global_batch}; "
          f"compute from {p.basis}")
    print(f"software: {predictions[0].config.software.describe(p)}; MFU as torch's FLOP counter counts (torch) and "
          f"as published figures do (6N: {report.PUBLISHED_CONVENTION})")
    print(report.table(predictions, scenario))
    if not choose:
        fastest = predictions[0]
        print(f"Fastest: {fastest.config.label()}, {fastest.tokens_per_second_per_gpu:,.0f} tokens/s per GPU"
              f"{'' if fastest.fits else ' — does not fit'}{'; not runnable by train' if fastest.runnable else ''}. "
              "(--choose picks the fastest that fits and train runs.)")
    elif best is None:
        least = min(predictions, key=lambda q: q.memory_bytes)
        print(f"Nothing fits {p.memory_bytes / 2**30:.0f} GiB that scaletrain train runs: the least memory is "
              f"{least.config.label()} at "
              f"{least.memory_bytes / 2**30:.1f} GiB; use more GPUs (--gpus), full activation checkpointing or a "
              "shorter sequence")
    else:
        margin = (best.tokens_per_second_per_gpu / runner_up.tokens_per_second_per_gpu - 1) if runner_up else math.inf
        free = 1 - best.memory_bytes / p.memory_bytes
        print(f"Chosen: {best.config.label()}: {best.tokens_per_second_per_gpu:,.0f} tokens/s per GPU, MFU "
              f"{best.mfu:.0%} (torch) / {best.mfu_published:.0%} (6N), step {best.step_seconds:.2f} s, "
              f"{best.memory_bytes / 2**30:.1f} GiB per GPU ({free:.0%} of the GPU free); 1T tokens in "
              f"{report.duration(report.trillion_tokens_seconds(best))}.")
        print("  " + report.step_line(best))
        print("  " + report.memory_line(best))
        if runner_up:
            print(f"Runner-up: {runner_up.config.label()}, {runner_up.tokens_per_second_per_gpu:,.0f} tokens/s per "
                  f"GPU ({margin:+.1%} for the chosen).")
        print("Run it: " + report.train_flags(best.config, scenario, best.microbatches))
        if best.config.software != Software(compile=best.config.software.compile):
            print("  (scaletrain train runs its own software: the prediction above is the named software's)")
    if out:
        print(f"written: {out} and {Path(out).with_suffix('.png')}")
