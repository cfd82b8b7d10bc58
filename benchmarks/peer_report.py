"""Tables for benchmarks/peers.py: medians, ratios against raw DDP, and the markdown file."""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from peer_configs import REPO, Config, environment

PEERS = {
    "raw": "hand-written DDP loop, `torchrun --nproc-per-node N` (torchrun sets OMP_NUM_THREADS=1 when N > 1)",
    "api": "scaletrain library API (`scaletrain.init` / `run.setup` / `run.loader` / `run.train_step`), "
           "`torchrun --nproc-per-node N`, scaletrain's defaults",
    "trainer": "`scaletrain train --workload W --nproc-per-node N --device cpu`, scaletrain's defaults",
    "accelerate": "`accelerate launch [--multi_gpu --num_processes N] run_accelerate.py`, `Accelerator(cpu=True)` "
                  "when no GPU is visible, no config file, Accelerate's own thread default",
    "fabric": "`Fabric(accelerator=\"cpu\", devices=N, strategy=\"ddp\")` + `fabric.launch()` (its subprocess "
              "launcher), Fabric's own thread default",
}


def summarise(config: Config, runs: list[dict], reference: list[dict] | None) -> dict:
    speed = statistics.median(r["samples_per_second"] for r in runs)
    startup = statistics.median(r["startup_seconds"] for r in runs)
    row = {"config": config, "speed": speed, "startup": startup, "n": len(runs),
           "threads": sorted({r.get("threads") for r in runs}), "speed_ratio": None, "startup_ratio": None}
    if reference:
        row["speed_ratio"] = speed / statistics.median(r["samples_per_second"] for r in reference)
        row["startup_ratio"] = startup / statistics.median(r["startup_seconds"] for r in reference)
    return row


def rows(configs: list[Config], results: dict[str, list[dict]]) -> list[dict]:
    out = []
    for c in configs:
        reference = results.get(Config("raw", c.workload, c.nproc).key)
        out.append(summarise(c, results[c.key], reference))
    return out


def _ratio(value) -> str:
    return "—" if value is None else f"{value:.3f}×"


def print_table(configs: list[Config], results: dict[str, list[dict]]) -> None:
    print(f"\n{'configuration':40} {'samples/s':>10} {'vs raw':>8} {'start-up s':>11} {'vs raw':>8}  threads  runs")
    for row in rows(configs, results):
        print(f"{row['config'].key:40} {row['speed']:10.1f} {_ratio(row['speed_ratio']):>8} {row['startup']:11.2f} "
              f"{_ratio(row['startup_ratio']):>8}  {row['threads']}  {row['n']}")


def markdown(configs: list[Config], results: dict[str, list[dict]], accuracy: list[dict], args, seconds: float) -> str:
    import torch

    lines = [
        "# scaletrain against raw DDP, Accelerate and Fabric: measured",
        "",
        f"Written by `benchmarks/peers.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"in {seconds / 60:.1f} min: {args.reps} alternating repetition(s) of every configuration, "
        f"{args.epochs} epochs each (the first is warm-up), batch {args.batch_size} per process, Adam, "
        f"CPU (gloo), {_machine()}, torch {torch.__version__}, Python {platform.python_version()}.",
        "",
        "Medians; ratios against raw DDP with the same workload and process count. Start-up is from "
        "starting the command to the end of the first training step.",
        "",
        "| workload | processes | runner | samples/s | vs raw DDP | start-up (s) | vs raw DDP | threads/process | runs |",
        "|---|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for row in rows(configs, results):
        c = row["config"]
        runner = c.runner + ("" if c.compression == "none" else f" + {c.compression} gradients")
        lines.append(f"| {c.workload} | {c.nproc} | {runner} | {row['speed']:.1f} | {_ratio(row['speed_ratio'])} | "
                     f"{row['startup']:.2f} | {_ratio(row['startup_ratio'])} | "
                     f"{', '.join(map(str, row['threads']))} | {row['n']} |")
    if accuracy:
        lines += ["", "Held-out accuracy of `scaletrain train --workload digits-mlp --nproc-per-node 2` "
                  "(real data, 360 held-out digits, seed 0):", "",
                  "| gradient compression | held-out accuracy | samples/s |", "|---|---:|---:|"]
        lines += [f"| {a['compression']} | {a['accuracy'] * 100:.2f}% | {a['samples_per_second']:.0f} |"
                  for a in accuracy]
    lines += ["", "What each runner was given:", ""]
    lines += [f"- **{name}**: {text}" for name, text in PEERS.items() if name in args.runners.split(",")]
    lines += ["", "Every run, samples/s in the order run:", ""]
    for key, runs in results.items():
        lines.append(f"- {key}: " + ", ".join(f"{r['samples_per_second']:.0f}" for r in runs))
    return "\n".join(lines) + "\n"


def _machine() -> str:
    from scaletrain.devices import cpu_cores

    return f"{cpu_cores()} CPU core(s) ({platform.processor() or platform.machine()})"


def accuracy_rows(scratch: Path, compressions: list[str], timeout: float) -> list[dict]:
    """digits-mlp on 2 processes, fp32 gradients and compressed: the held-out accuracy cost."""
    found = []
    for name in ["none", *(c for c in compressions if c != "none")]:
        out = scratch / f"accuracy-{name}"
        subprocess.run([sys.executable, "-m", "scaletrain", "train", "--workload", "digits-mlp", "--nproc-per-node",
                        "2", "--device", "cpu", "--grad-compression", name, "--out", str(out)], env=environment(),
                       cwd=REPO, check=True, timeout=timeout, stdout=subprocess.DEVNULL)
        summary = json.loads((out / "summary.json").read_text())
        found.append({"compression": name, "accuracy": summary["final_accuracy"],
                      "samples_per_second": summary["samples_per_second"]})
        print(f"digits-mlp, 2 processes, --grad-compression {name}: held-out accuracy "
              f"{summary['final_accuracy']:.4f}", flush=True)
    return found
