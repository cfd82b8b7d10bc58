"""float8 training against bf16 on one GPU (H100/H200): the loss curves must stay close, and
the speed of each is recorded.

    python benchmarks/gpu_float8_check.py --out DIR             # on a GPU with float8 (under a minute)
    python benchmarks/gpu_float8_check.py --out DIR --dry-run   # on a CPU: bf16 runs, float8 must be refused

The same model, data and seed, trained by scaletrain (`strategy="fsdp"`, one process, full
activation checkpointing) with `precision="bf16"` and with `precision="float8"`, each in a
fresh process: gpu_llama.py's "f8" size (dim 4096, 4 layers, FFN 14336: 1.08 B parameters,
the large matrices float8 is for), sequence 4096, batch 2, `--steps` steps of a token stream
the model learns. The check passes when, over the last half of the steps, the float8 loss is
within `--tolerance` (default 5%) of bf16's at every step; it prints both curves, both speeds
(median step time of the last half; eager, no torch.compile — torchao's float8 gains most
with compile) and writes DIR/gpu_float8_check.json and .md. Exit status 0 when it passes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_llama  # noqa: E402
from gpu_vs_torchtitan import run_scaletrain  # noqa: E402


def settings(args) -> dict:
    if args.dry_run:
        return {"size": "tiny", "seq_len": 32, "batch": 2, "window": args.steps, "device": "cpu", "lr": 1e-3}
    return {"size": "f8", "seq_len": 4096, "batch": 2, "window": args.steps, "device": "cuda", "lr": 1e-3}


def one(precision: str, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        result_file = Path(fh.name)
    argv = [sys.executable, __file__, "--worker", precision, "--result", str(result_file), "--steps", str(args.steps)]
    if args.dry_run:
        argv.append("--dry-run")
    began = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
        result = json.loads(result_file.read_text()) if result_file.stat().st_size else {}
        if done.returncode and "error" not in result:
            result["error"] = f"exit status {done.returncode}: {done.stderr.strip()[-1500:]}"
    except subprocess.TimeoutExpired:
        result = {"error": f"did not finish within {args.timeout:.0f} s"}
    finally:
        result_file.unlink(missing_ok=True)
    result["wall_seconds"] = time.monotonic() - began
    return result


def worker(precision: str, args) -> None:
    from scaletrain.foundation.errors import UsageError

    s = settings(args)
    # run_scaletrain trains WARMUP + 3 windows; here one window holds every step (WARMUP 3 + 3 × steps)
    s["window"] = max(1, args.steps // 3)
    try:
        result = run_scaletrain(s, precision=precision)
    except UsageError as exc:  # the one-line refusal (a CPU, a GPU without float8, no torchao)
        result = {"refused": str(exc)}
    except Exception as exc:  # noqa: BLE001 - recorded with the results
        import traceback

        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    Path(args.result).write_text(json.dumps(result))


def compare(bf16: dict, f8: dict, tolerance: float) -> dict:
    a, b = bf16["losses"], f8["losses"]
    half = len(a) // 2
    gaps = [abs(y - x) / abs(x) for x, y in zip(a[half:], b[half:])]
    step_a = statistics.median(bf16["step_seconds"][half:])
    step_b = statistics.median(f8["step_seconds"][half:])
    return {"max_relative_gap_last_half": max(gaps), "passes": max(gaps) <= tolerance, "tolerance": tolerance,
            "bf16_step_s": step_a, "float8_step_s": step_b, "float8_speedup": step_a / step_b,
            "bf16_first_last": [a[0], a[-1]], "float8_first_last": [b[0], b[-1]]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--steps", type=int, default=9, help="measured steps after 3 warm-up steps (a multiple of 3)")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=45.0, help="seconds each precision may take")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args)
        return 0
    if not args.out:
        p.error("--out DIR is required")
    bf16, f8 = one("bf16", args), one("float8", args)
    report = {"settings": settings(args), "bf16": bf16, "float8": f8,
              "arch": gpu_llama.describe(gpu_llama.SIZES[settings(args)["size"]])}
    lines = []
    if "losses" in bf16 and "losses" in f8:
        report["comparison"] = c = compare(bf16, f8, args.tolerance)
        lines += [f"{bf16.get('device_name', 'cpu')}; {report['arch']['parameters'] / 1e9:.2f} B parameters, sequence "
                  f"{settings(args)['seq_len']}, batch {settings(args)['batch']}, fsdp on one GPU, full activation "
                  "checkpointing, eager", "",
                  "| precision | loss, first → last | median step (last half) | tokens/s | peak memory |",
                  "|---|---|---:|---:|---:|"]
        tokens = settings(args)["batch"] * settings(args)["seq_len"]
        for name, r, step in (("bf16", bf16, c["bf16_step_s"]), ("float8", f8, c["float8_step_s"])):
            memory = f"{r['peak_allocated_bytes'] / 2**30:.1f} GiB" if r.get("peak_allocated_bytes") else "–"
            lines.append(f"| {name} | {r['losses'][0]:.3f} → {r['losses'][-1]:.3f} | {step * 1e3:,.0f} ms | "
                         f"{tokens / step:,.0f} | {memory} |")
        lines += ["", f"float8 ÷ bf16 speed: {c['float8_speedup']:.2f}×; largest loss gap over the last half: "
                      f"{c['max_relative_gap_last_half']:.2%} (tolerance {args.tolerance:.0%}): "
                      f"{'PASS' if c['passes'] else 'FAIL'}"]
        status = 0 if c["passes"] else 1
    elif args.dry_run and "losses" in bf16 and f8.get("refused"):
        lines.append(f"dry run: bf16 trained ({bf16['losses'][0]:.3f} → {bf16['losses'][-1]:.3f}); float8 refused: "
                     f"{f8['refused']}")
        status = 0
    else:
        lines.append(f"could not compare: bf16 {bf16.get('error') or bf16.get('refused')}; "
                     f"float8 {f8.get('error') or f8.get('refused')}")
        status = 1
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_float8_check.json").write_text(json.dumps(report, indent=1))
    (args.out / "gpu_float8_check.md").write_text("\n".join(lines) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
