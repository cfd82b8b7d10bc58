"""scaletrain against torchtitan on one GPU: the same Llama-style model, sequence length, batch,
precision (bf16) and activation checkpointing (full), trained by each; tokens/s, MFU and peak
memory of each, medians of 3 measurement windows.

    python benchmarks/gpu_vs_torchtitan.py --out DIR                # on a GPU (about 2 minutes)
    python benchmarks/gpu_vs_torchtitan.py --out DIR --compile      # both compiled (torch.compile per block)
    python benchmarks/gpu_vs_torchtitan.py --out DIR --dry-run      # on a CPU: a tiny model, the same code paths

Each side runs in a fresh process, one after the other: 3 warm-up steps, then 3 windows of
`--window` steps (each step timed to the GPU's completion); a window's tokens/s is its tokens
÷ its time, and the figure is the median of the 3 windows. The model: `gpu_llama.py`'s "1b"
(dim 2048, 16 layers, GQA 32/8 heads, FFN 8192, vocab 128256, untied head: 1.50 B
parameters), sequence 8192, batch 1 per step, AdamW (fused), learning rate 3e-4.

- scaletrain: the library API as a user writes it, with its defaults —
  `scaletrain.init(strategy="fsdp", precision="bf16", activation_checkpointing="full")`, a
  Hugging Face `LlamaForCausalLM` built from a config, `run.setup`, `run.train_step` with
  `labels` (on one GPU: the model as it is under bf16 autocast, fp32 parameters; its RMSNorms
  by torch's fused kernel, its loss chunked, the logits let go before backward, the garbage
  collector on a schedule).
- torchtitan: its own `Trainer` and Llama 3 (torchtitan 0.2.2, installed from its wheel), the
  same architecture as a model flavour, its own parallelisation (on one GPU: bf16 autocast,
  fp32 parameters; full activation checkpointing), with the same synthetic tokens fed through
  its dataloader interface (no tokenizer or dataset download on a machine without a network).

MFU = tokens/s × model FLOPs per token (6 × non-embedding parameters + attention, as torchtitan
and Megatron count them; recomputation not counted) ÷ the GPU's bf16 dense peak, the same
formula for both. Results: DIR/gpu_vs_torchtitan.json and .md; a side that fails is recorded
with its error, never hidden.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_llama  # noqa: E402  (beside this file)

WARMUP, WINDOWS = 3, 3


def settings(args) -> dict:
    if args.dry_run:
        return {"size": "tiny", "seq_len": 32, "batch": 2, "window": 1, "device": "cpu", "lr": 3e-4,
                "compile": False}
    return {"size": args.size, "seq_len": args.seq_len, "batch": args.batch, "window": args.window, "device": "cuda",
            "lr": 3e-4, "compile": args.compile}


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _memory(device: str) -> dict:
    import torch

    if device != "cuda":
        return {}
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(), "device_name": torch.cuda.get_device_name()}


# -- scaletrain's side -------------------------------------------------------------------------
def run_scaletrain(s: dict, strategy: str = "fsdp", precision: str = "bf16", **options) -> dict:
    import torch

    import scaletrain

    arch = gpu_llama.SIZES[s["size"]]
    steps = WARMUP + WINDOWS * s["window"]
    data = gpu_llama.token_batches(arch, s["seq_len"], s["batch"], steps)
    with scaletrain.init(strategy=strategy, precision=precision, activation_checkpointing="full", seed=0,
                         device=s["device"], compile=s.get("compile", False), **options) as run:
        model = gpu_llama.hf_model(arch, str(run.device))
        parameters = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=0.1,
                                      fused=s["device"] == "cuda")
        model, optimizer = run.setup(model, optimizer)
        times, losses = [], []
        for step in range(steps):
            tokens = data[step, :, :-1]
            began = time.perf_counter()
            loss = run.train_step(model, optimizer, {"input_ids": tokens, "labels": tokens})
            _sync(s["device"])
            times.append(time.perf_counter() - began)
            losses.append(float(loss))
        return {"step_seconds": times, "losses": losses, "parameters": parameters,
                "parameters_match": parameters == arch.parameters(), **_memory(s["device"])}


# -- torchtitan's side -------------------------------------------------------------------------
def torchtitan_trainer(s: dict, folder: str):
    """torchtitan's Trainer for the benchmark's model and data (its Llama 3, a flavour of this
    architecture; a train spec whose dataloader yields the same synthetic tokens)."""
    import torch
    import torchtitan_imports

    torchtitan_imports.install()  # stand-ins for its data and logging packages, where missing
    import torchtitan.protocols.train_spec as train_spec
    from torchtitan.components.dataloader import BaseDataLoader
    from torchtitan.config import ConfigManager
    from torchtitan.models.llama3 import llama3_args

    arch = gpu_llama.SIZES[s["size"]]
    steps = WARMUP + WINDOWS * s["window"]
    data = gpu_llama.token_batches(arch, s["seq_len"], s["batch"], steps)

    class Tokens(BaseDataLoader):
        def __iter__(self):
            for step in range(steps):
                yield {"input": data[step, :, :-1]}, data[step, :, 1:]

        def state_dict(self):
            return {}

        def load_state_dict(self, state_dict):
            pass

    llama3_args["scaletrain_bench"] = gpu_llama.torchtitan_args(arch, s["seq_len"])
    base = train_spec.get_train_spec("llama3")
    spec = dataclasses.replace(base, build_tokenizer_fn=None, build_validator_fn=None,
                               build_dataloader_fn=lambda **kwargs: Tokens())
    if "scaletrain_llama3" not in train_spec._extra_train_specs:
        train_spec.register_train_spec("scaletrain_llama3", spec)
    config = ConfigManager().parse_args([
        "--model.name", "scaletrain_llama3", "--model.flavor", "scaletrain_bench",
        "--training.local_batch_size", str(s["batch"]), "--training.seq_len", str(s["seq_len"]),
        "--training.steps", str(steps), "--training.mixed_precision_param", "bfloat16",
        "--activation_checkpoint.mode", "full", "--optimizer.name", "AdamW", "--optimizer.lr", str(s["lr"]),
        "--optimizer.implementation", "fused", "--lr_scheduler.warmup_steps", "1", "--metrics.log_freq", "1000",
        "--job.dump_folder", folder, *(["--compile.enable"] if s.get("compile") else [])])
    if s["device"] != "cuda":
        return config, None  # torchtitan trains on accelerators only: the dry run checks its configuration
    from torchtitan.train import Trainer

    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
    torch.manual_seed(0)
    return config, Trainer(config)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_torchtitan(s: dict) -> dict:
    import torch

    with tempfile.TemporaryDirectory(prefix="torchtitan-") as folder:
        config, trainer = torchtitan_trainer(s, folder)
        arch = gpu_llama.SIZES[s["size"]]
        if trainer is None:  # the dry run: the model torchtitan would build has the benchmark's size
            from torchtitan.models.llama3 import Transformer

            with torch.device("meta"):
                model = Transformer(gpu_llama.torchtitan_args(arch, s["seq_len"]))
            count = sum(p.numel() for p in model.parameters())
            return {"configured": True, "parameters": count, "flavor": config.model.flavor,
                    "parameters_match": count == arch.parameters()}
        times, losses = [], []
        step, forward_backward = trainer.train_step, trainer.forward_backward_step

        def timed(data_iterator):
            began = time.perf_counter()
            step(data_iterator)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - began)

        def with_loss(*a, **k):
            loss = forward_backward(*a, **k)
            losses.append(loss.detach())
            return loss
        trainer.train_step, trainer.forward_backward_step = timed, with_loss
        trainer.train()
        result = {"step_seconds": times, "losses": [float(x) for x in losses], **_memory(s["device"])}
        trainer.close() if hasattr(trainer, "close") else None
        return result


# -- the comparison --------------------------------------------------------------------------------
def summarise(side: dict, s: dict) -> dict:
    if "step_seconds" not in side:
        return side
    arch = gpu_llama.SIZES[s["size"]]
    tokens = s["batch"] * s["seq_len"]
    measured = side["step_seconds"][WARMUP:]
    windows = [tokens * s["window"] / sum(measured[i * s["window"]:(i + 1) * s["window"]]) for i in range(WINDOWS)]
    rate = statistics.median(windows)
    peak, source = gpu_llama.peak_flops(side.get("device_name", "cpu")) if s["device"] == "cuda" else (None, "cpu")
    mfu = rate * arch.flops_per_token(s["seq_len"]) / peak if peak else None
    return {**side, "tokens_per_second_windows": windows, "tokens_per_second": rate,
            "tflops_per_second": rate * arch.flops_per_token(s["seq_len"]) / 1e12, "mfu": mfu, "peak_source": source}


def side_in_subprocess(name: str, args, timeout: float) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        result_file = fh.name
    argv = [sys.executable, __file__, "--side", name, "--result", result_file, "--size", args.size,
            "--seq-len", str(args.seq_len), "--batch", str(args.batch), "--window", str(args.window)]
    if args.compile:
        argv.append("--compile")
    if args.dry_run:
        argv.append("--dry-run")
    began = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        result = json.loads(Path(result_file).read_text()) if Path(result_file).stat().st_size else {}
        if done.returncode and "error" not in result:
            result["error"] = f"exit status {done.returncode}: {done.stderr.strip()[-1500:]}"
    except subprocess.TimeoutExpired:
        result = {"error": f"did not finish within {timeout:.0f} s"}
    finally:
        Path(result_file).unlink(missing_ok=True)
    result["wall_seconds"] = time.monotonic() - began
    return result


def table(results: dict, s: dict) -> str:
    arch = gpu_llama.SIZES[s["size"]]
    device = next((r.get("device_name") for r in results.values() if r.get("device_name")), s["device"])
    lines = [f"{device}; model {s['size']} ({arch.parameters() / 1e9:.2f} B parameters), sequence {s['seq_len']}, "
             f"batch {s['batch']}, bf16, full activation checkpointing, {'compiled' if s.get('compile') else 'eager'}; "
             f"medians of {WINDOWS} windows of {s['window']} steps", "",
             "| framework | tokens/s | TFLOP/s | MFU | peak memory (allocated) | peak memory (reserved) | vs torchtitan |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    base = results.get("torchtitan", {}).get("tokens_per_second")
    for name, r in results.items():
        if "error" in r or "tokens_per_second" not in r:
            lines.append(f"| {name} | {r.get('error') or json.dumps(r)} | | | | | |")
            continue
        gb = lambda key: f"{r[key] / 2**30:.1f} GiB" if r.get(key) else "–"  # noqa: E731
        mfu = f"{r['mfu']:.1%}" if r.get("mfu") else "–"
        ratio = f"{r['tokens_per_second'] / base:.2f}×" if base else "–"
        lines.append(f"| {name} | {r['tokens_per_second']:,.0f} | {r['tflops_per_second']:,.1f} | {mfu} | "
                     f"{gb('peak_allocated_bytes')} | {gb('peak_reserved_bytes')} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for gpu_vs_torchtitan.json and .md")
    p.add_argument("--dry-run", action="store_true", help="on the CPU: a tiny model through the same code")
    p.add_argument("--size", default="1b", choices=sorted(gpu_llama.SIZES))
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--window", type=int, default=4, help="steps per measurement window")
    p.add_argument("--compile", action="store_true", help="both sides compile the model's blocks (torch.compile)")
    p.add_argument("--sides", default="torchtitan,scaletrain", help="which to run, in this order")
    p.add_argument("--timeout", type=float, default=85.0, help="seconds each side may take")
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    s = settings(args)
    if args.side:  # one side, in its own process
        try:
            result = run_torchtitan(s) if args.side == "torchtitan" else run_scaletrain(s)
        except ImportError as exc:
            result = {"error": f"cannot import {exc.name or exc}: install torchtitan and its dependencies (see "
                               "docs/performance.md)" if args.side == "torchtitan" else str(exc)}
        except Exception as exc:  # noqa: BLE001 - recorded in the results, with its traceback's end
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        Path(args.result).write_text(json.dumps(result))
        return
    if not args.out:
        p.error("--out DIR is required")
    results = {}
    for name in args.sides.split(","):
        results[name] = summarise(side_in_subprocess(name, args, args.timeout), s)
        print(f"{name}: {json.dumps({k: v for k, v in results[name].items() if k not in ('traceback',)})[:400]}",
              flush=True)
    text = table(results, s)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_vs_torchtitan.json").write_text(json.dumps({"settings": s, "results": results,
                                                                  "arch": gpu_llama.describe(
                                                                      gpu_llama.SIZES[s["size"]])}, indent=1))
    (args.out / "gpu_vs_torchtitan.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
