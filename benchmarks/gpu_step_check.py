"""The cluster planner's prediction of one GPU's training step against `scaletrain train`
measuring it: a Llama-style model of about 1.2 B parameters (Llama 3.2 1B's shape), built from
its config, bf16 (FSDP2's mixed precision on one process), sequences of 2048 and 4096 tokens,
with and without full activation checkpointing.

Each configuration is one `scaletrain train --model-config ... --max-steps N` run, with the
defaults (`--strategy fsdp` on one GPU trains the model as it is: autocast, fp32 parameters);
its step time is the median of its per-step records after the first few (metrics.jsonl), its
memory the allocator's peaks (summary.json), allocated and reserved, each compared with the
prediction of the same (the prediction without and with the allocator's reserve). A run that
fails is a row with its last line, never the end of the script. The prediction is `scaletrain plan --hardware`'s for 1 GPU
of this kind, from the profile named by the GPU's exact name and, with --calibration, the
calibration just measured on this very GPU (benchmarks/calibrate_gpu.py). Writes
DIR/gpu_step_check.md and .json. About 2 minutes on an H100 or H200.

    python benchmarks/calibrate_gpu.py --out runs/gpu && \\
    python benchmarks/gpu_step_check.py --out runs/gpu --calibration runs/gpu/h200.json

`--dry-run`: a tiny model on the CPU through the same code (the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Llama 3.2 1B's shape (its config.json's fields): 1.24 B parameters, embeddings tied.
LLAMA_1B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
            "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
            "tie_word_embeddings": True, "rms_norm_eps": 1e-5}
TINY = {**LLAMA_1B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "max_position_embeddings": 512}
GPU_CASES = [(2048, 4, "none"), (2048, 4, "full"), (4096, 2, "none"), (4096, 2, "full")]
DRY_CASES = [(32, 1, "full")]
# Steps per run, a record every EVERY (each record's samples/s covers the steps since the one
# before: a host synchronisation per record, not per step); the first SKIP steps (warm-up, the
# step whose FLOPs are counted) are not timed.
STEPS, SKIP, EVERY = 12, 4, 4
DRY_STEPS, DRY_SKIP, DRY_EVERY = 4, 2, 1
RUN_TIMEOUT = 240


def run_train(config_file: Path, seq: int, mb: int, ac: str, out: Path, dry: bool, timeout: float = RUN_TIMEOUT) -> dict:
    """The measured run: its step time and memory, or {"failure": its last line}."""
    steps, skip, every = (DRY_STEPS, DRY_SKIP, DRY_EVERY) if dry else (STEPS, SKIP, EVERY)
    cmd = [sys.executable, "-m", "scaletrain", "train", "--model-config", str(config_file), "--seq-len", str(seq),
           "--batch-size", str(mb), "--nproc-per-node", "1", "--strategy", "fsdp", "--max-steps", str(steps),
           "--log-every-steps", str(every), "--out", str(out)]
    if ac != "none":
        cmd += ["--activation-checkpointing", ac]
    cmd += ["--device", "cpu"] if dry else ["--precision", "bf16"]  # a CPU's bf16 is slow: the dry run checks code
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failure": f"did not finish within {timeout:.0f} s", "seconds": time.perf_counter() - started}
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return {"failure": last[0][:300], "seconds": time.perf_counter() - started}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in records if r.get("kind") == "step" and r["step"] > skip and r.get("samples_per_second")]
    summary = json.loads((out / "summary.json").read_text())
    if not steps:
        return {"failure": "no timed step recorded", "seconds": time.perf_counter() - started}
    step_s = statistics.median(mb / r["samples_per_second"] for r in steps)
    return {"step_seconds": step_s, "peak_memory_bytes": max(summary.get("peak_memory_bytes") or [0]),
            "peak_reserved_bytes": max(summary.get("peak_memory_reserved_bytes") or [0]) or None,
            "mfu": summary.get("mfu"), "mfu_note": summary.get("mfu_note"), "seconds": time.perf_counter() - started}


def predict(shape, profile, seq: int, mb: int, ac: str):
    from scaletrain.plan.cluster.config import ClusterConfig, ClusterScenario
    from scaletrain.plan.cluster.step import predict as predict_step

    scenario = ClusterScenario(shape, profile, 1, 1, seq, mb)
    # One process, one shard: the model as it is, under autocast (what train runs by default).
    return predict_step(ClusterConfig(microbatch=mb, checkpointing=ac), scenario)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--calibration", type=Path, help="a calibration measured on this GPU (calibrate_gpu.py's file)")
    p.add_argument("--hardware", help="the profile to predict with (default: the one naming this GPU)")
    p.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the script")
    p.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT, help="seconds each configuration's run may take")
    args = p.parse_args(argv)
    import torch

    from scaletrain.foundation.errors import UsageError
    from scaletrain.hardware import profile_here
    from scaletrain.hardware.calibration import Calibration
    from scaletrain.workloads.model_shapes import shape_from_config

    dry = args.dry_run or not torch.cuda.is_available()
    if dry and not args.dry_run:
        print("gpu_step_check: no CUDA device here; running the CPU dry run instead")
    try:
        profile = profile_here(args.hardware, dry)
    except UsageError as exc:
        print(f"gpu_step_check: {exc}")
        return 2
    if args.calibration:
        calibration = Calibration.from_dict(json.loads(args.calibration.read_text()), str(args.calibration))
        profile = replace(profile, calibration=calibration, compute_scale=1.0, memory_scale=1.0)
    config = TINY if dry else LLAMA_1B
    shape = shape_from_config(config, "llama-1b")
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {"device": "cpu (dry run)" if dry else torch.cuda.get_device_name(),
                "torch_version": torch.__version__, "profile": profile.name, "basis": profile.basis,
                "model": "Llama 3.2 1B shape (GQA 32/8 heads)" if not dry else "tiny (GQA 4/2 heads)",
                "parameters": shape.parameters}
    rows: list = []
    with tempfile.TemporaryDirectory() as tmp:
        config_file = Path(tmp) / "llama-1b.json"
        config_file.write_text(json.dumps(config))
        for i, (seq, mb, ac) in enumerate(DRY_CASES if dry else GPU_CASES):
            measured = run_train(config_file, seq, mb, ac, Path(tmp) / f"run{i}", dry, args.run_timeout)
            try:
                predicted = predict(shape, profile, seq, mb, ac)
            except Exception as exc:  # noqa: BLE001 - a row, not the end of the script
                rows.append({"seq": seq, "microbatch": mb, "checkpointing": ac,
                             "failure": f"the prediction failed: {type(exc).__name__}: {exc}"[:300]})
                continue
            rows.append(compare(seq, mb, ac, measured, predicted))
            print(_line(rows[-1]), flush=True)
            write(args.out, {**settings, "rows": rows})  # after every row: a deadline still leaves a table
    write(args.out, {**settings, "rows": rows})
    print(markdown({**settings, "rows": rows}))
    return 0


def write(out: Path, result: dict) -> None:
    (out / "gpu_step_check.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "gpu_step_check.md").write_text(markdown(result))


def compare(seq: int, mb: int, ac: str, measured: dict, predicted) -> dict:
    """One row: the measured run beside the prediction, like with like — the allocator's
    allocated peak against the prediction without its reserve, the reserved peak against the
    prediction with it."""
    allocated = predicted.memory_bytes - predicted.memory.get("allocator", 0.0)
    row = {"seq": seq, "microbatch": mb, "checkpointing": ac, **measured,
           "predicted_step_seconds": predicted.step_seconds, "predicted_memory_bytes": allocated,
           "predicted_reserved_bytes": predicted.memory_bytes, "predicted_mfu": predicted.mfu}
    if "step_seconds" in measured:
        row["step_error"] = predicted.step_seconds / measured["step_seconds"] - 1
        peak, reserved = measured["peak_memory_bytes"], measured.get("peak_reserved_bytes")
        row["memory_error"] = allocated / peak - 1 if peak else None
        row["reserved_error"] = predicted.memory_bytes / reserved - 1 if reserved else None
    return row


def _line(row: dict) -> str:
    if "step_seconds" not in row:
        return f"seq {row['seq']} mb {row['microbatch']} AC {row['checkpointing']}: failed: {row.get('failure')}"
    return (f"seq {row['seq']} mb {row['microbatch']} AC {row['checkpointing']}: measured {row['step_seconds']:.4f} s, "
            f"predicted {row['predicted_step_seconds']:.4f} s ({row['step_error']:+.1%})")


def markdown(result: dict) -> str:
    lines = [f"One GPU's training step, {result['model']} ({result['parameters'] / 1e9:.2f} B parameters), bf16, on "
             f"{result['device']} (torch {result['torch_version']}); predicted with the {result['profile']} profile "
             f"({result['basis']}).", "",
             "| seq | micro-batch | activation checkpointing | measured step s | predicted step s | error | "
             "allocated GiB, measured / predicted | error | reserved GiB, measured / predicted | error |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if "step_seconds" not in r:
            lines.append(f"| {r['seq']} | {r['microbatch']} | {r['checkpointing']} | failed: {r.get('failure')} "
                         "| | | | | | |")
            continue
        pct = lambda key: f"{r[key]:+.1%}" if r.get(key) is not None else "–"  # noqa: E731
        reserved = f"{r['peak_reserved_bytes'] / 2**30:.1f}" if r.get("peak_reserved_bytes") else "–"
        lines.append(f"| {r['seq']} | {r['microbatch']} | {r['checkpointing']} | {r['step_seconds']:.4f} | "
                     f"{r['predicted_step_seconds']:.4f} | {pct('step_error')} | {r['peak_memory_bytes'] / 2**30:.1f} / "
                     f"{r['predicted_memory_bytes'] / 2**30:.1f} | {pct('memory_error')} | {reserved} / "
                     f"{r['predicted_reserved_bytes'] / 2**30:.1f} | {pct('reserved_error')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
