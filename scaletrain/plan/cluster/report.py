"""A cluster plan shown: the table, the JSON rows, the `scaletrain train` flags of a choice,
and a PNG of each configuration's tokens/s against its memory and the GPU's."""

from __future__ import annotations

from pathlib import Path

from .config import ClusterConfig, ClusterScenario
from .flop_conventions import PUBLISHED_CONVENTION
from .prediction import ClusterPrediction
from .runnable import train_strategy

GIB = 2 ** 30


def row(p: ClusterPrediction, scenario: ClusterScenario) -> dict:
    c = p.config
    return {
        "configuration": c.label(), "strategy": c.strategy, "world_size": c.world,
        "dp_replicate": c.dp_replicate, "dp_shard": c.dp_shard, "tp": c.tp, "pp": c.pp, "cp": c.cp, "ep": c.ep,
        "schedule": c.schedule if c.pp > 1 else None, "stages_per_rank": c.stages_per_rank,
        "micro_batch": c.microbatch, "microbatches": p.microbatches, "activation_checkpointing": c.checkpointing,
        "float8": c.float8, "compile": c.compile, "software": software_row(c, scenario),
        "tokens_per_second_per_gpu": p.tokens_per_second_per_gpu,
        "mfu": p.mfu, "mfu_convention": MFU_CONVENTION,
        "mfu_published": p.mfu_published, "mfu_published_convention": PUBLISHED_CONVENTION,
        "tflops_per_second_per_gpu": p.model_flops_per_step / p.step_seconds / c.world / 1e12,
        "step_seconds": p.step_seconds, "compute_seconds": p.compute_seconds,
        "exposed_comm_seconds": p.exposed_comm_seconds, "bubble_seconds": p.bubble_seconds,
        "step_parts_seconds": dict(p.comm),
        "memory_bytes": p.memory_bytes, "memory_parts_bytes": p.memory, "fits": p.fits,
        "model_flops_per_step": p.model_flops_per_step, "hardware_flops_per_step": p.hardware_flops_per_step,
        "days_per_trillion_tokens": trillion_tokens_seconds(p) / 86400,
        "runnable_by_train": not p.runnable, "not_runnable_because": p.runnable or None,
        "train_flags": train_flags(c, scenario, p.microbatches),
    }


#: How `mfu` counts: torch's FLOP counter's model FLOPs (a run's `model_flops_per_step` counts the same).
MFU_CONVENTION = ("torch's FLOP counter: forward and backward as the kernels compute them (attention's whole score "
                  "matrix, backward 2.5 × forward), recomputation not counted, ÷ the bf16 dense peak")


def software_row(c: ClusterConfig, scenario: ClusterScenario) -> dict:
    s, profile = c.software, scenario.profile
    return {"torch": ".".join(map(str, s.version(profile))), "attention": s.attention,
            "attention_kernel": s.attention_kernel(profile), "loss": s.loss, "compile": s.compile,
            "layer_kernels": "fused" if s.fused_layers else s.layer_kernels, "kv_expanded": s.kv_expanded(profile),
            "reduce_dtype": s.reduce_dtype}


def trillion_tokens_seconds(p: ClusterPrediction) -> float:
    return 1e12 / (p.tokens_per_second_per_gpu * p.config.world)


def duration(seconds: float) -> str:
    """'3.2 days', '7.5 hours', '12 minutes': the unit that keeps the figure readable."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} seconds"


def train_flags(c: ClusterConfig, scenario: ClusterScenario, microbatches: int) -> str:
    """The `scaletrain train` command line that runs this configuration."""
    nodes = max(1, c.world // scenario.gpus_per_node)
    per_node = min(c.world, scenario.gpus_per_node)
    name, options = train_strategy(c, microbatches)
    flags = [f"--model-config {scenario.model_config or scenario.shape.name}", f"--seq-len {scenario.seq}",
             f"--nnodes {nodes}", f"--nproc-per-node {per_node}", f"--precision {options.pop('precision')}",
             f"--strategy {name}"]
    batch = c.microbatch * microbatches if c.pp > 1 else c.microbatch
    flags.append(f"--batch-size {batch}")
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        flags.append(flag if value is True else f"{flag} {value}")
    return "scaletrain train " + " ".join(flags)


def table(predictions: list[ClusterPrediction], scenario: ClusterScenario, limit: int = 15) -> str:
    lines = ["| configuration | tokens/s/GPU | MFU (torch / 6N) | step s (compute / exposed comm / bubble) | "
             "memory GiB | fits |", "|---|---:|---:|---|---:|---|"]
    for p in predictions[:limit]:
        fits = ("yes" if p.fits else "no") + ("; not runnable by train" if p.runnable else "")
        lines.append(f"| {p.config.label()} | {p.tokens_per_second_per_gpu:,.0f} | {p.mfu:.0%} / {p.mfu_published:.0%} | "
                     f"{p.step_seconds:.2f} ({p.compute_seconds:.2f} / {p.exposed_comm_seconds:.2f} / "
                     f"{p.bubble_seconds:.2f}) | {p.memory_bytes / GIB:.1f} | {fits} |")
    if len(predictions) > limit:
        lines.append(f"| … {len(predictions) - limit} more (--json lists all) | | | | | |")
    return "\n".join(lines)


def step_line(p: ClusterPrediction) -> str:
    """What the step's communication and the parallelisms' terms are: those per layer and
    micro-batch in ms (on the critical path), those per step in s."""
    layer = [f"{_name(k, '_per_layer_s')} {v * 1e3:.2f} ms" for k, v in p.comm.items() if k.endswith("_per_layer_s")]
    step = [f"{_name(k, '_s')} {v:.2f} s" for k, v in p.comm.items() if not k.endswith("_per_layer_s") and v >= 0.005]
    text = f"step {p.step_seconds:.2f} s: compute {p.compute_seconds:.2f}, exposed communication " \
           f"{p.exposed_comm_seconds:.2f}, bubble {p.bubble_seconds:.2f}"
    if layer:
        text += "; per layer and micro-batch: " + ", ".join(layer)
    return text + ("; per step: " + ", ".join(step) if step else "")


def _name(key: str, suffix: str) -> str:
    return key[: -len(suffix)].replace("_", " ")


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
