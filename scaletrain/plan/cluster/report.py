"""A cluster plan shown: the table, the JSON rows, the `scaletrain train` flags of a choice,
and a PNG of each configuration's tokens/s against its memory and the GPU's."""

from __future__ import annotations

from pathlib import Path

from .config import ClusterConfig, ClusterScenario
from .prediction import ClusterPrediction

GIB = 2 ** 30


def row(p: ClusterPrediction, scenario: ClusterScenario) -> dict:
    c = p.config
    return {
        "configuration": c.label(), "strategy": c.strategy, "world_size": c.world,
        "dp_replicate": c.dp_replicate, "dp_shard": c.dp_shard, "tp": c.tp, "pp": c.pp, "cp": c.cp,
        "schedule": c.schedule if c.pp > 1 else None, "stages_per_rank": c.stages_per_rank,
        "micro_batch": c.microbatch, "microbatches": p.microbatches, "activation_checkpointing": c.checkpointing,
        "float8": c.float8, "compile": c.compile,
        "tokens_per_second_per_gpu": p.tokens_per_second_per_gpu, "mfu": p.mfu,
        "tflops_per_second_per_gpu": p.model_flops_per_step / p.step_seconds / c.world / 1e12,
        "step_seconds": p.step_seconds, "compute_seconds": p.compute_seconds,
        "exposed_comm_seconds": p.exposed_comm_seconds, "bubble_seconds": p.bubble_seconds,
        "memory_bytes": p.memory_bytes, "memory_parts_bytes": p.memory, "fits": p.fits,
        "model_flops_per_step": p.model_flops_per_step, "hardware_flops_per_step": p.hardware_flops_per_step,
        "days_per_trillion_tokens": 1e12 / (p.tokens_per_second_per_gpu * c.world) / 86400,
        "train_flags": train_flags(c, scenario, p.microbatches),
    }


def train_flags(c: ClusterConfig, scenario: ClusterScenario, microbatches: int) -> str:
    """The `scaletrain train` command line that runs this configuration."""
    nodes = max(1, c.world // scenario.gpus_per_node)
    per_node = min(c.world, scenario.gpus_per_node)
    flags = [f"--model-config {scenario.model_config or scenario.shape.name}", f"--seq-len {scenario.seq}",
             f"--nnodes {nodes}",
             f"--nproc-per-node {per_node}", "--precision bf16"]
    if c.pp > 1:
        flags += ["--strategy pipeline", f"--pp {c.pp}", f"--microbatches {microbatches}",
                  f"--batch-size {c.microbatch * microbatches}"]
        if c.dp_shard > 1:
            flags.append(f"--dp-shard {c.dp_shard}")
    else:
        flags += [f"--strategy {'fsdp' if c.dp_shard > 1 else ('tp' if c.tp > 1 and c.dp_replicate == 1 else 'ddp')}",
                  f"--batch-size {c.microbatch}"]
        if microbatches > 1:
            flags.append(f"--grad-accum {microbatches}")
        if c.dp_shard > 1:
            flags.append(f"--dp-shard {c.dp_shard}")
    if c.dp_replicate > 1 and c.dp_shard > 1:
        flags.append(f"--dp-replicate {c.dp_replicate}")
    if c.tp > 1:
        flags.append(f"--tp {c.tp}")
    if c.cp > 1:
        flags.append(f"--cp {c.cp}")
    if c.checkpointing != "none":
        flags.append(f"--activation-checkpointing {c.checkpointing}")
    if c.compile:
        flags.append("--compile")
    if c.float8:
        flags.append("--precision float8")
        flags.remove("--precision bf16")
    return "scaletrain train " + " ".join(flags)


def table(predictions: list[ClusterPrediction], scenario: ClusterScenario, limit: int = 15) -> str:
    lines = ["| configuration | tokens/s/GPU | MFU | step s (compute / exposed comm / bubble) | memory GiB | fits |",
             "|---|---:|---:|---|---:|---|"]
    for p in predictions[:limit]:
        lines.append(f"| {p.config.label()} | {p.tokens_per_second_per_gpu:,.0f} | {p.mfu:.0%} | "
                     f"{p.step_seconds:.2f} ({p.compute_seconds:.2f} / {p.exposed_comm_seconds:.2f} / "
                     f"{p.bubble_seconds:.2f}) | {p.memory_bytes / GIB:.1f} | {'yes' if p.fits else 'no'} |")
    if len(predictions) > limit:
        lines.append(f"| … {len(predictions) - limit} more (--json lists all) | | | | | |")
    return "\n".join(lines)


def memory_line(p: ClusterPrediction) -> str:
    parts = ", ".join(f"{k.replace('_', ' ')} {v / GIB:.1f}" for k, v in p.memory.items() if v >= 0.05 * GIB)
    return f"memory per GPU {p.memory_bytes / GIB:.1f} GiB: {parts}"


def plot(predictions: list[ClusterPrediction], scenario: ClusterScenario, path: Path) -> None:
    """Tokens/s per GPU (bars) and memory per GPU (dots) of each configuration, with the GPU's
    memory as a line: what fits and what it gives."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = predictions[:25]
    fig, speed = plt.subplots(figsize=(max(7, 0.45 * len(shown) + 3), 5))
    x = range(len(shown))
    speed.bar(x, [p.tokens_per_second_per_gpu for p in shown],
              color=["tab:blue" if p.fits else "lightgray" for p in shown])
    speed.set_ylabel("tokens/s per GPU (grey: does not fit)")
    speed.set_xticks(list(x), [p.config.label().replace(", ", "\n", 1) for p in shown], rotation=70, fontsize=7)
    memory = speed.twinx()
    memory.plot(list(x), [p.memory_bytes / GIB for p in shown], "o", color="tab:red")
    memory.axhline(scenario.profile.memory_bytes / GIB, color="tab:red", linestyle="--", linewidth=1)
    memory.set_ylabel("memory per GPU, GiB (dashed: the GPU's)", color="tab:red")
    speed.set_title(f"{scenario.shape.name} on {scenario.gpus} × {scenario.profile.name}, seq {scenario.seq}, "
                    f"global batch {scenario.global_batch}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
