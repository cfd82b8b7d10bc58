"""Tables for benchmarks/peers.py: medians, ratios against raw DDP, and the markdown file."""

from __future__ import annotations

import json
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from peer_configs import REPO, Config, environment

PEERS = {
    "raw": "hand-written DDP loop, `torchrun --nproc-per-node N` (torchrun sets OMP_NUM_THREADS=1 when N > 1)",
    "api": "scaletrain library API (`scaletrain.init` / `run.setup` / `run.loader` / `run.train_step`), "
           "`torchrun --nproc-per-node N`, scaletrain's defaults",
    "api-unpinned": "the same API loop given exactly the raw loop's settings: `scaletrain.init(pin=False)` "
                    "(one thread per process, core affinity left to the OS) — the library's own cost",
    "trainer": "`scaletrain train --workload W --nproc-per-node N --device D`, scaletrain's defaults",
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
        # Raw DDP runs on this machine only: a two-host row has no raw row to compare with.
        reference = None if c.link else results.get(Config("raw", c.workload, c.nproc).key)
        out.append(summarise(c, results[c.key], reference))
    return out


#: The comparisons the benchmark is for: (runner, against), at the same workload and process count.
HEADLINES = (("api-unpinned", "raw"), ("api", "raw"), ("trainer", "accelerate"), ("trainer", "fabric"))


def _compare(runs: list[dict], reference: list[dict], key: str) -> dict:
    """Medians of `key` in both, their ratio, and the paired ratio: the median of the ratios
    of runs made in the same repetition (the lists are in run order)."""
    mine, theirs = (statistics.median(r[key] for r in rs) for rs in (runs, reference))
    return {"mine": mine, "theirs": theirs, "ratio": mine / theirs,
            "paired": statistics.median(a[key] / b[key] for a, b in zip(runs, reference))}


def headline_rows(configs: list[Config], results: dict[str, list[dict]]) -> list[dict]:
    """Samples/s of each headline pair (and start-up of the trainer against raw DDP) at 2+
    processes on this machine: ratio of medians and paired ratio."""
    found = []
    for c in configs:
        if c.tree and c.compression == "none" and not c.link:  # this version against the other, run for run
            mine, theirs = results.get(replace(c, tree="").key), results.get(c.key)
            for key in ("samples_per_second", "startup_seconds"):
                if mine and theirs:
                    found.append({"what": f"{c.runner} of this version ÷ of [{Path(c.tree).name}], "
                                          f"{'start-up' if key == 'startup_seconds' else 'samples/s'}",
                                  "workload": c.workload, "nproc": c.nproc, **_compare(mine, theirs, key)})
            continue
        if c.nproc < 2 or c.link or c.compression != "none":
            continue
        pairs = [(against, "samples_per_second") for runner, against in HEADLINES if runner == c.runner]
        pairs += [("raw", "startup_seconds")] if c.runner == "trainer" else []
        for against, key in pairs:
            mine, theirs = results.get(c.key), results.get(Config(against, c.workload, c.nproc).key)
            if not mine or not theirs:
                continue
            found.append({"what": f"{c.runner} ÷ {against}, {'start-up' if key == 'startup_seconds' else 'samples/s'}",
                          "workload": c.workload, "nproc": c.nproc, **_compare(mine, theirs, key)})
    return found


def compression_rows(configs: list[Config], results: dict[str, list[dict]]) -> list[dict]:
    """Every compressed configuration against the same one with fp32 gradients: medians of
    each, and the median of the ratios of runs made in the same repetition."""
    found = []
    for c in configs:
        fp32 = Config(c.runner, c.workload, c.nproc, "none", c.link)
        if c.compression == "none" or not results.get(fp32.key) or not results.get(c.key):
            continue
        plain, compressed = results[fp32.key], results[c.key]
        found.append({"config": c, **_compare(compressed, plain, "samples_per_second"),
                      "n": min(len(plain), len(compressed))})
    return found


def _where(c: Config) -> str:
    if not c.link:
        return f"one machine, {c.nproc} processes"
    return f"2 hosts, 1 core each, {link_words(c.link)}"


def link_words(link: str) -> str:
    """'10gbit' -> 'a 10 Gbit/s link' (tc's rate spelling, as a reader would write it)."""
    if link == "veth":
        return "an uncapped veth link"
    match = re.fullmatch(r"([\d.]+)([kmgt]?)bit", link.lower())
    return f"a {match[1]} {match[2].upper()}bit/s link" if match else f"a link at tc rate {link}"


def _ratio(value) -> str:
    return "—" if value is None else f"{value:.3f}×"


def print_table(configs: list[Config], results: dict[str, list[dict]]) -> None:
    print(f"\n{'configuration':46} {'samples/s':>10} {'vs raw':>8} {'start-up s':>11} {'vs raw':>8}  threads  runs")
    for row in rows(configs, results):
        print(f"{row['config'].key:46} {row['speed']:10.1f} {_ratio(row['speed_ratio']):>8} {row['startup']:11.2f} "
              f"{_ratio(row['startup_ratio']):>8}  {row['threads']}  {row['n']}")
    for row in headline_rows(configs, results):
        print(f"{row['what']}, {row['workload']}, {row['nproc']} processes: {row['mine']:.2f} vs {row['theirs']:.2f} "
              f"= {row['ratio']:.3f}× (paired {row['paired']:.3f}×)")
    for row in compression_rows(configs, results):
        c = row["config"]
        print(f"{c.compression} gradients vs fp32, {c.runner}, {_where(c)}: {row['mine']:.1f} vs {row['theirs']:.1f} "
              f"samples/s = {row['ratio']:.3f}× (paired {row['paired']:.3f}×)")


def markdown(configs: list[Config], results: dict[str, list[dict]], accuracy: list[dict], args, seconds: float) -> str:
    import torch

    lines = [
        "# scaletrain against raw DDP, Accelerate and Fabric: measured",
        "",
        f"Written by `benchmarks/peers.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"in {seconds / 60:.1f} min: {args.reps} alternating repetition(s) of every configuration, "
        f"{args.epochs} epochs each (the first is warm-up), batch {args.batch_size} per process, Adam, "
        f"{_device(args.device)}, {_machine()}, torch {torch.__version__}, Python {platform.python_version()}.",
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
        runner += f" (2 hosts, {link_words(c.link)})" if c.link else ""
        runner += f" [{Path(c.tree).name}]" if c.tree else ""
        lines.append(f"| {c.workload} | {c.nproc} | {runner} | {row['speed']:.1f} | {_ratio(row['speed_ratio'])} | "
                     f"{row['startup']:.2f} | {_ratio(row['startup_ratio'])} | "
                     f"{', '.join(map(str, row['threads']))} | {row['n']} |")
    headlines = headline_rows(configs, results)
    if headlines:
        lines += ["", "The comparisons the benchmark is for (ratio of medians; *paired*: the median of the ratios of "
                  "runs made in the same repetition, which a slow spell on a shared machine affects less):", "",
                  "| comparison | workload | processes | value | reference | ratio | paired ratio |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['what']} | {r['workload']} | {r['nproc']} | {r['mine']:.2f} | {r['theirs']:.2f} | "
                  f"{r['ratio']:.3f}× | {r['paired']:.3f}× |" for r in headlines]
    compression = compression_rows(configs, results)
    if compression:
        lines += ["", "Gradient compression on the communication-heavy MLP against fp32 gradients, same runner, same "
                  "place (medians; *paired*: the median of the ratios of runs made in the same repetition):", "",
                  "| where | runner | gradients | fp32 samples/s | compressed samples/s | ratio | paired ratio | runs |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {_where(r['config'])} | {r['config'].runner} | {r['config'].compression} | {r['theirs']:.1f} | "
                  f"{r['mine']:.1f} | {r['ratio']:.3f}× | {r['paired']:.3f}× | {r['n']} |" for r in compression]
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


def _device(device: str) -> str:
    import torch

    if device == "cuda":
        return f"CUDA (nccl), one GPU per process: {torch.cuda.get_device_name(0)}"
    return "CPU (gloo)"


def _machine() -> str:
    from scaletrain.process.devices import cpu_cores

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
