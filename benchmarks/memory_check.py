"""The plan's memory prediction against the measured peak, per process, for every strategy.

    flock /tmp/scaletrain-bench.lock python benchmarks/memory_check.py [--models mlp134,stdlib-gpt,llama]

For each model, `scaletrain plan` measures once (its probe: the process's constant part, the
model's bytes, its activations with and without checkpointing); then `scaletrain train
--max-steps` runs each configuration — single, ddp ×2, fsdp ×2, pipeline ×2 and a composition
(HSDP 2 × 2 for the MLP, FSDP × TP 2 × 2 for the transformers), each without and with
activation checkpointing — and the largest process's `peak_memory_bytes` is compared with the
plan's `memory_bytes` for that configuration. DeepSpeed's published formula for model states
(16 bytes per parameter for mixed-precision Adam, ÷ N under ZeRO-3; activations and the
process left out) and Accelerate's `estimate-memory` ("training with Adam": 4 × the fp32 model)
are shown beside where they apply. Prints a Markdown table (also to --out). plan and train both
run with their defaults (the default allocator: tcmalloc where installed); `--steady-memory`
(glibc's allocator with freed tensors of 2 MB and more returned at once) or `--allocator NAME`
are given to both when asked for.

Models: mlp134 (a user's 134 MB MLP, `--model memory_models:mlp134` on the synthetic images),
stdlib-gpt (the built-in byte-level GPT at batch 256), llama (a Hugging Face Llama from a config on
the same text). Runs from benchmarks/ so that `memory_models` imports.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from memory_flags import add_memory_flag_arguments, apply_memory_flags, with_memory_flags  # noqa: E402

MODELS = {
    "mlp134": {"flags": ["--workload", "synthetic-mlp", "--model", "memory_models:mlp134", "--batch-size", "32"],
               "composition": ("fsdp", 4, {"dp_replicate": 2})},
    "stdlib-gpt": {"flags": ["--workload", "stdlib-gpt", "--batch-size", "256"],
                   "composition": ("fsdp", 4, {"tp": 2})},
    "llama": {"flags": ["--workload", "stdlib-gpt", "--model", "memory_models:llama", "--batch-size", "32"],
              "composition": ("fsdp", 4, {"tp": 2})},
}
#: For reshard_after_forward: many equal blocks (16 of 2048², 270 MB), where keeping them gathered shows.
DEEP = {"flags": ["--workload", "synthetic-mlp", "--model", "memory_models:deep_mlp", "--batch-size", "32"],
        "env": {"SCALETRAIN_BIG_BLOCKS": "16", "SCALETRAIN_BIG_WIDTH": "2048"}}
STRATEGIES = [("single", 1, {}), ("ddp", 2, {}), ("fsdp", 2, {}), ("pipeline", 2, {})]


def _run(argv: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = with_memory_flags(argv)
    done = subprocess.run([sys.executable, "-m", "scaletrain", *argv], cwd=HERE, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"scaletrain {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def flags_of(options: dict) -> list[str]:
    from scaletrain.bench.spec import option_flags

    return option_flags(options)


def probe_for(model: str, folder: Path):
    from scaletrain.plan.probe import probe_from_dict

    out = folder / f"{model}-plan.json"
    spec = MODELS.get(model, DEEP)
    _run(["plan", *spec["flags"], "--strategy", "single", "--world-sizes", "1,2", "--probe-rounds", "1",
          "--steps", "5", "--min-seconds", "0.5", "--json", "--out", str(out)], timeout=900, env=spec.get("env"))
    return probe_from_dict(json.loads(out.read_text())["probe"])


def measured(model: str, strategy: str, nproc: int, options: dict, steps: int, folder: Path) -> tuple[float, float]:
    """(the largest process's training peak, samples/s) of a short training run."""
    out = folder / f"{model}-{strategy}-{nproc}-{'-'.join(f'{k}{v}' for k, v in options.items()) or 'plain'}"
    spec = MODELS.get(model, DEEP)
    _run(["train", *spec["flags"], "--strategy", strategy, "--nproc-per-node", str(nproc),
          "--max-steps", str(steps), "--log-every-steps", str(steps), "--out", str(out), *flags_of(options)],
         timeout=900, env=spec.get("env"))
    summary = json.loads((out / "summary.json").read_text())
    return max(summary["peak_memory_bytes"]), summary["samples_per_second"]


def predicted(probe, strategy: str, nproc: int, options: dict):
    from scaletrain.plan.machine import default_machine
    from scaletrain.plan.predict import predict

    return predict(probe, strategy, nproc, default_machine(probe.device_type, nproc_per_node=nproc), options)


def peers(probe, strategy: str, nproc: int) -> tuple[str, str]:
    """DeepSpeed's model-states formula and Accelerate's estimate, where they apply (MB)."""
    params = probe.footprint.param_bytes / 4
    deepspeed = {"single": 16 * params, "ddp": 16 * params, "fsdp": 16 * params / nproc}.get(strategy)
    accelerate = 4 * probe.footprint.param_bytes if strategy in ("single", "ddp") else None
    return tuple("" if v is None else f"{v / 1e6:,.0f}" for v in (deepspeed, accelerate))


def reshard_lines(model: str, probe, steps: int, folder: Path) -> list[str]:
    """fsdp ×2 with the gathered blocks freed after forward (true) and kept (false): the peak
    and the step, measured and predicted."""
    runs = {}
    for keep in (True, False):
        options = {"reshard_after_forward": keep}
        guess = predicted(probe, "fsdp", 2, options)
        peak, rate = measured(model, "fsdp", 2, options, steps, folder)
        runs[keep] = (guess, peak, rate)
    (g_on, p_on, r_on), (g_off, p_off, r_off) = runs[True], runs[False]
    return [f"{model} fsdp ×2, reshard_after_forward false against true: peak {p_off / 1e6:,.0f} vs {p_on / 1e6:,.0f} MB "
            f"measured ({'higher' if p_off > p_on else 'not higher'}), {g_off.memory_bytes / 1e6:,.0f} vs "
            f"{g_on.memory_bytes / 1e6:,.0f} MB predicted; samples/s {r_off:,.1f} vs {r_on:,.1f} measured "
            f"({'faster' if r_off > r_on else 'not faster'}), step {g_off.step_s * 1e3:.0f} vs {g_on.step_s * 1e3:.0f} ms "
            "predicted"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--steps", type=int, default=6, help="optimizer steps of each training run (default 6)")
    p.add_argument("--checkpointing", default="none,full", help="activation checkpointing modes (default none,full)")
    p.add_argument("--strategies", default="", help="only the configurations of these strategies (default: all)")
    p.add_argument("--no-reshard", dest="reshard", action="store_false",
                   help="skip the comparison of fsdp ×2 with reshard_after_forward true and false (on a deep MLP)")
    add_memory_flag_arguments(p)
    p.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = p.parse_args(argv)
    apply_memory_flags(args)
    started = time.time()
    rows = ["| model | configuration | checkpointing | predicted MB | measured MB | error | DeepSpeed (states) MB | "
            "Accelerate MB |", "|---|---|---|---:|---:|---:|---:|---:|"]
    errors, found, lines = [], {}, []
    with tempfile.TemporaryDirectory(prefix="scaletrain-memory-") as tmp:
        for model in [m for m in args.models.split(",") if m]:
            probe = probe_for(model, Path(tmp))
            print(f"{model}: constant {probe.memory_constant_bytes / 1e6:,.0f} MB, parameters "
                  f"{probe.footprint.param_bytes / 1e6:,.0f} MB, probe's own peak {probe.memory_peak_bytes / 1e6:,.0f} MB",
                  flush=True)
            for strategy, nproc, options in [*STRATEGIES, MODELS[model]["composition"]]:
                if args.strategies and strategy not in args.strategies.split(","):
                    continue
                for mode in args.checkpointing.split(","):
                    chosen = {**options, **({"activation_checkpointing": mode} if mode != "none" else {})}
                    guess = predicted(probe, strategy, nproc, chosen)
                    predicted_bytes = None if guess is None else guess.memory_bytes
                    peak, _rate = measured(model, strategy, nproc, chosen, args.steps, Path(tmp))
                    found[(model, strategy, nproc, mode)] = (predicted_bytes, peak)
                    error = None if predicted_bytes is None else predicted_bytes / peak - 1
                    if error is not None:
                        errors.append(abs(error))
                    label = f"{strategy} ×{nproc}" + "".join(f" {k}={v}" for k, v in options.items())
                    ds, acc = peers(probe, strategy, nproc)
                    row = (f"| {model} | {label} | {mode} | "
                           f"{'' if predicted_bytes is None else f'{predicted_bytes / 1e6:,.0f}'} | "
                           f"{peak / 1e6:,.0f} | {'' if error is None else f'{error:+.1%}'} | {ds} | {acc} |")
                    rows.append(row)
                    print(row, flush=True)
        if args.reshard:
            lines += reshard_lines("deep", probe_for("deep", Path(tmp)), args.steps, Path(tmp))
    for (model, strategy, nproc, mode), (guess, peak) in found.items():
        plain = found.get((model, strategy, nproc, "none"))
        if mode != "none" and plain and guess is not None and plain[0] is not None:
            saved, predicted_saving = plain[1] - peak, plain[0] - guess
            lines.append(f"{model} {strategy} ×{nproc}: checkpointing ({mode}) lowers the peak by "
                         f"{saved / 1e6:,.0f} MB measured, {predicted_saving / 1e6:,.0f} MB predicted "
                         f"({predicted_saving / saved - 1:+.0%})" if saved else f"{model} {strategy}: no saving measured")
    summary = (f"{len(errors)} configurations; within ±10%: {sum(e <= 0.10 for e in errors)}; "
               f"largest error {max(errors, default=0):.1%}; {(time.time() - started) / 60:.1f} min")
    for line in [*lines, summary]:
        print(line)
    if args.out:
        args.out.write_text("\n".join(rows) + "\n\n" + "\n\n".join([*lines, summary]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
