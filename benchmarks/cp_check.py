"""Context parallel's plan against measurement: memory per process and step time at cp 2 for the
same sequences as one process.

    flock /tmp/scaletrain-cpu.lock python benchmarks/cp_check.py [--seq-len 4096] [--batch-size 4] [--out DIR]

1. Memory. `scaletrain plan` predicts the peak per process of one process (cp 1: `single`) and
   of FSDP over a context-parallel pair (`--cp 2`); `scaletrain train --max-steps` then runs
   each, in turn, `--repeats` times, and the largest process's `peak_memory_bytes` is read from
   summary.json. The check: the drop from cp 1 to cp 2, measured (medians) against predicted,
   within 10%.
2. Step time. `scaletrain bench` measures the same two (and the threads-only loop) in rounds,
   each round with the plan's own measurements, and reports the plan's predicted step of cp 2
   next to the measured one: medians over `--rounds` (3), within 15%.

plan and train run with their defaults (the default allocator: tcmalloc where installed), as a
user runs them; `--steady-memory` or `--allocator NAME` are given to both when asked for. Prints a Markdown table (also to --out/cp_check.md, with cp_check.json). Runs on
a shared machine: the table says how busy it was. `--dry-run` runs everything tiny (seq 64,
batch 2, 2 steps, 1 round), to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from memory_flags import FLAGS, add_memory_flag_arguments, apply_memory_flags, with_memory_flags  # noqa: E402

MEMORY_WITHIN, STEP_WITHIN = 0.10, 0.15


def scaletrain(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    argv = with_memory_flags(argv)
    done = subprocess.run([sys.executable, "-m", "scaletrain", *argv], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())
    if done.returncode != 0:
        raise SystemExit(f"scaletrain {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def workload_flags(args) -> list[str]:
    return ["--workload", "stdlib-gpt", "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size)]


def predicted_memory(args, folder: Path) -> dict:
    """{"cp1": bytes, "cp2": bytes}: the plan's peak per process of each."""
    out = folder / "plan.json"
    done = scaletrain(["plan", *workload_flags(args), "--strategy", "single,fsdp", "--cp", "2", "--world-sizes",
                       "1,2", "--steps", str(args.steps), "--warmup", "2", "--json"], timeout=1800)
    out.write_text(done.stdout)
    rows = json.loads(done.stdout)["predictions"]
    found = {}
    for row in rows:
        if row["strategy"] == "single" and row["world_size"] == 1:
            found["cp1"] = row["memory_bytes"]
        elif row["strategy"] == "fsdp" and row["world_size"] == 2:
            found["cp2"] = row["memory_bytes"]
    return found


def measured_memory(args, folder: Path) -> dict:
    """{"cp1": [peak per run], "cp2": [...]}: the largest process's peak of each run, alternating."""
    runs = {"cp1": ["--strategy", "single", "--nproc-per-node", "1"], "cp2": ["--cp", "2", "--nproc-per-node", "2"]}
    found: dict = {name: [] for name in runs}
    for repeat in range(args.repeats):
        for name, flags in (runs.items() if repeat % 2 == 0 else reversed(runs.items())):
            out = folder / f"{name}-{repeat}"
            scaletrain(["train", *workload_flags(args), *flags, "--max-steps", str(args.steps), "--out", str(out)],
                       timeout=1800)
            summary = json.loads((out / "summary.json").read_text())
            found[name].append(max(summary["peak_memory_bytes"]))
    return found


def bench(args, folder: Path) -> dict:
    """The plan's predicted and the measured step of cp 2 (medians over the rounds, seconds)."""
    out = folder / "bench"
    scaletrain(["bench", *workload_flags(args), "--strategy", "single,fsdp", "--cp", "2", "--world-sizes", "1,2",
                "--rounds", str(args.rounds), "--steps", str(args.steps), "--warmup", "2", "--out", str(out)],
               timeout=3600)
    doc = json.loads((out / "bench.json").read_text())
    row = next(c for c in doc["configurations"] if c["strategy"] == "fsdp")
    return {"measured_step_s": row["step_s"]["median"], "predicted_step_s": row["predicted_step_s"]["median"],
            "measured_values": row["step_s"]["values"], "predicted_values": row["predicted_step_s"]["values"],
            "rounds_left_out": len(doc.get("rounds_left_out", []))}


def table(args, memory: dict, measured: dict, step: dict, load: float) -> tuple[str, bool]:
    mb = 1 / 2**20
    drop_predicted = memory["cp1"] - memory["cp2"]
    med = {name: statistics.median(values) for name, values in measured.items()}
    drop_measured = med["cp1"] - med["cp2"]
    drop_error = drop_predicted / drop_measured - 1 if drop_measured else float("inf")
    step_error = step["predicted_step_s"] / step["measured_step_s"] - 1
    ok = abs(drop_error) <= MEMORY_WITHIN and abs(step_error) <= STEP_WITHIN
    lines = [f"stdlib-gpt, {args.seq_len} tokens per sequence, batch {args.batch_size}; cp 1: one process "
             f"(single), cp 2: two processes (fsdp, `--cp 2`); {' '.join(FLAGS) or 'the defaults'}",
             "",
             "| | cp 1 | cp 2 | cp 1 − cp 2 | error |",
             "|---|---:|---:|---:|---:|",
             f"| peak memory per process, predicted (MB) | {memory['cp1'] * mb:,.0f} | {memory['cp2'] * mb:,.0f} | "
             f"{drop_predicted * mb:,.0f} | |",
             f"| peak memory per process, measured (MB, median of {args.repeats}) | {med['cp1'] * mb:,.0f} | "
             f"{med['cp2'] * mb:,.0f} | {drop_measured * mb:,.0f} | {drop_error:+.1%} |",
             f"| step of cp 2, plan (ms, median of {args.rounds} rounds) | | {step['predicted_step_s'] * 1e3:,.0f} | | |",
             f"| step of cp 2, measured (ms, median of {args.rounds} rounds) | | {step['measured_step_s'] * 1e3:,.0f} | | "
             f"{step_error:+.1%} |",
             "",
             f"Memory drop within {MEMORY_WITHIN:.0%} and step within {STEP_WITHIN:.0%}: "
             f"{'yes' if ok else 'no'}. The machine's load average over the last 5 minutes at the end: {load:.1f} "
             f"(bench left out {step['rounds_left_out']} round(s) other processes disturbed)."]
    return "\n".join(lines), ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=10, help="training steps per memory run, measured steps per bench run")
    p.add_argument("--repeats", type=int, default=3, help="memory runs of each")
    p.add_argument("--rounds", type=int, default=3, help="bench rounds")
    p.add_argument("--out", type=Path)
    p.add_argument("--dry-run", action="store_true", help="tiny sizes: checks the script, not the plan")
    add_memory_flag_arguments(p)
    args = p.parse_args()
    apply_memory_flags(args)
    if args.dry_run:
        args.seq_len, args.batch_size, args.steps, args.repeats, args.rounds = 64, 2, 2, 1, 1
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.out or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        memory = predicted_memory(args, folder)
        measured = measured_memory(args, folder)
        step = bench(args, folder)
        text, ok = table(args, memory, measured, step, os.getloadavg()[1])
        print(text)
        if args.out:
            (args.out / "cp_check.md").write_text(text + "\n")
            (args.out / "cp_check.json").write_text(json.dumps(
                {"predicted_memory_bytes": memory, "measured_memory_bytes": measured, "step": step,
                 "seq_len": args.seq_len, "batch_size": args.batch_size, "ok": ok}, indent=2))
    return 0 if ok or args.dry_run else 1


if __name__ == "__main__":
    raise SystemExit(main())
