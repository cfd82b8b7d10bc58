"""float8 training against bf16 on one GPU (H100/H200): the loss curves must stay close, and
float8 must be faster.

    python benchmarks/gpu_float8_check.py --out DIR             # on a GPU with float8 (about 2 minutes)
    python benchmarks/gpu_float8_check.py --out DIR --dry-run   # on a CPU: bf16 runs, float8 must be refused

The same model, data and seed, trained by scaletrain (`strategy="fsdp"`, one process, full
activation checkpointing, the defaults otherwise) with `precision="bf16"` eager, bf16 compiled
(`compile=True`), and `precision="float8"` (which compiles by itself), each in a fresh process:
gpu_llama.py's "f8" size (dim 4096, 4 layers, FFN 14336: 1.08 B parameters, the large matrices
float8 is for), sequence 4096, batch 2, `--steps` steps of a token stream the model learns.
float8 is compared with each bf16 run: it passes when, over the last half of the steps, its
loss is within `--tolerance` (default 1%) of bf16's at every step. Speeds are median step
times of the last half. Writes DIR/gpu_float8_check.json and .md; exit status 0 when it passes.
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


#: The runs: (name, precision, compile).
RUNS = (("bf16", "bf16", False), ("bf16 compiled", "bf16", True), ("float8", "float8", False))


def one(name: str, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        result_file = Path(fh.name)
    argv = [sys.executable, __file__, "--worker", name, "--result", str(result_file), "--steps", str(args.steps)]
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


def worker(name: str, args) -> None:
    from scaletrain.foundation.errors import UsageError

    _name, precision, compiled = next(run for run in RUNS if run[0] == name)
    s = {**settings(args), "compile": compiled}
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
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=90.0, help="seconds each run may take")
    p.add_argument("--runs", default=",".join(name for name, *_ in RUNS),
                   help="which runs, in this order (the dry run leaves out the compiled one)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args)
        return 0
    if not args.out:
        p.error("--out DIR is required")
    wanted = [name for name in args.runs.split(",") if name and not (args.dry_run and name == "bf16 compiled")]
    runs = {}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in wanted:
        runs[name] = one(name, args)
        report, lines, status = summarise(runs, args)
        (args.out / "gpu_float8_check.json").write_text(json.dumps(report, indent=1))  # after each run
        (args.out / "gpu_float8_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return status


def summarise(runs: dict, args) -> tuple[dict, list, int]:
    """(the report, its Markdown lines, the exit status): float8 against each bf16 run."""
    s = settings(args)
    report = {"settings": s, "runs": runs, "arch": gpu_llama.describe(gpu_llama.SIZES[s["size"]]), "comparisons": {}}
    f8 = runs.get("float8", {})
    device = next((r.get("device_name") for r in runs.values() if r.get("device_name")), "cpu")
    lines = [f"{device}; {report['arch']['parameters'] / 1e9:.2f} B parameters, sequence {s['seq_len']}, batch "
             f"{s['batch']}, fsdp on one GPU, full activation checkpointing (float8 compiled)", "",
             "| run | loss, first → last | median step (last half) | tokens/s | peak memory | float8 ÷ it | "
             "largest loss gap, last half |", "|---|---|---:|---:|---:|---:|---:|"]
    status = 0
    tokens = s["batch"] * s["seq_len"]
    for name, r in runs.items():
        if "losses" not in r:
            lines.append(f"| {name} | {r.get('refused') or r.get('error')} | | | | | |")
            status = status if (args.dry_run and r.get("refused")) else 1
            continue
        half = len(r["losses"]) // 2
        step = statistics.median(r["step_seconds"][half:])
        memory = f"{r['peak_allocated_bytes'] / 2**30:.1f} GiB" if r.get("peak_allocated_bytes") else "–"
        versus, gap = "", ""
        if name != "float8" and "losses" in f8:
            report["comparisons"][name] = c = compare(r, f8, args.tolerance)
            versus = f"{c['float8_speedup']:.2f}×"
            gap = f"{c['max_relative_gap_last_half']:.2%} {'PASS' if c['passes'] else 'FAIL'}"
            status = status if c["passes"] else 1
        lines.append(f"| {name} | {r['losses'][0]:.3f} → {r['losses'][-1]:.3f} | {step * 1e3:,.0f} ms | "
                     f"{tokens / step:,.0f} | {memory} | {versus} | {gap} |")
    return report, lines, status


if __name__ == "__main__":
    sys.exit(main())
