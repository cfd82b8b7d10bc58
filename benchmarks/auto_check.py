"""`--strategy auto`'s choice against an exhaustive search of the same candidates.

    flock /tmp/scaletrain-bench.lock python benchmarks/auto_check.py [--workloads ...] [--worlds 2,4]

For each scenario — a workload × a world size × a memory budget — `scaletrain plan --choose`
picks a configuration (its time is the decision's cost), and every candidate it considered is
then trained for real (`scaletrain train --max-steps`) and timed: the steady samples/s of its
later step records, and its measured peak memory. The exhaustive search's answer is the
fastest candidate whose measured peak fits the budget; auto is right when its choice is within
10% of that. Prints a Markdown table (also to --out) and the times of both. plan and train run
with their defaults (the default allocator: tcmalloc where installed); `--steady-memory` or
`--allocator NAME` are given to both when asked for.
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
sys.path.insert(0, str(HERE.parent))

from memory_flags import add_memory_flag_arguments, apply_memory_flags, with_memory_flags  # noqa: E402

WORKLOADS = {"synthetic-cnn": [], "synthetic-mlp": [], "stdlib-gpt": ["--batch-size", "64"]}


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    argv = with_memory_flags(argv)
    done = subprocess.run([sys.executable, "-m", "scaletrain", *argv], cwd=HERE, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"scaletrain {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def choose(workload: str, world: int, budget_gb: float | None, out: Path) -> tuple[dict, float]:
    started = time.perf_counter()
    argv = ["plan", "--choose", "--workload", workload, *WORKLOADS[workload], "--world-sizes", str(world),
            "--nproc-per-node", str(world), "--probe-rounds", "2", "--steps", "10", "--warmup", "2",
            "--min-seconds", "0.5", "--json", "--out", str(out)]
    if budget_gb:
        argv += ["--device-memory-gb", f"{budget_gb:.3f}"]
    _run(argv, timeout=900)
    return json.loads(out.read_text()), time.perf_counter() - started


def measure(workload: str, world: int, strategy: str, options: dict, steps: int, out: Path) -> tuple[float, float, float]:
    """(steady samples/s, peak memory bytes, seconds the measurement took)."""
    from scaletrain.bench.spec import option_flags

    started = time.perf_counter()
    _run(["train", "--workload", workload, *WORKLOADS[workload], "--nproc-per-node", str(world), "--strategy",
          strategy, *option_flags(options), "--max-steps", str(steps), "--log-every-steps", "5", "--epochs", "50",
          "--out", str(out)], timeout=900)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["samples_per_second"] for r in records if r.get("kind") == "step" and r["step"] > steps // 3]
    summary = json.loads((out / "summary.json").read_text())
    return statistics.median(rates), max(summary["peak_memory_bytes"]), time.perf_counter() - started


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--worlds", default="2,4")
    p.add_argument("--tight", type=float, default=0.5,
                   help="the tight budget: this far down from the largest candidate's predicted peak towards the "
                        "smallest one's (default 0.5: half way)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", type=Path)
    p.add_argument("--json", type=Path, help="also write every candidate's predicted and measured figures here")
    add_memory_flag_arguments(p)
    args = p.parse_args(argv)
    apply_memory_flags(args)
    rows = ["| workload | processes | memory budget | auto chose | its samples/s | fastest measured | its samples/s | "
            "auto ÷ fastest | decision s | exhaustive s |", "|---|---:|---|---|---:|---|---:|---:|---:|---:|"]
    right, total, decided, searched = 0, 0, 0.0, 0.0
    kept: list = []  # every scenario's candidates, predicted and measured (--json)
    with tempfile.TemporaryDirectory(prefix="scaletrain-auto-") as tmp:
        for workload in [w for w in args.workloads.split(",") if w]:
            for world in [int(n) for n in args.worlds.split(",")]:
                free, free_s = choose(workload, world, None, Path(tmp) / f"{workload}-{world}-free.json")
                # The tight budget lies between the candidates' smallest and largest predicted
                # peaks (--tight of the way down from the largest): some fit, the largest do
                # not. Every process holds its constant part (torch, the data), so a share of
                # the largest alone can rule out every candidate.
                peaks = sorted(c["memory_bytes"] for c in free["candidates"])
                tight = peaks[0] + (1 - args.tight) * (peaks[-1] - peaks[0]) if peaks[-1] > peaks[0] else None
                measured: dict = {}
                for budget in (None, *([tight / 1e9] if tight else [])):
                    doc, seconds = (free, free_s) if budget is None else \
                        choose(workload, world, budget, Path(tmp) / f"{workload}-{world}-tight.json")
                    search_s = 0.0
                    print(f"  {workload} ×{world}: {len(doc['candidates'])} candidate(s)", flush=True)
                    # Every world size up to `world` is a candidate (one process first).
                    for strategy, options, n in [(c["strategy"], c["options"], c["world_size"])
                                                 for c in doc["candidates"]]:
                        key = (strategy, json.dumps(options, sort_keys=True), n)
                        if key not in measured:
                            folder = Path(tmp) / f"{workload}-{world}-{len(measured)}"
                            try:
                                measured[key] = measure(workload, n, strategy, options, args.steps, folder)
                            except RuntimeError as exc:
                                measured[key] = (0.0, float("inf"), 0.0)  # could not run: not a candidate
                                why = str(exc).strip().splitlines()[-1][:200]
                                print(f"  {workload} ×{world}: {strategy} {options} could not run: {why}", flush=True)
                        search_s += measured[key][2]
                    limit = budget * 1e9 if budget else float("inf")
                    fitting = {k: v for k, v in measured.items() if v[1] <= limit and v[0] > 0}
                    best_key = max(fitting, key=lambda k: fitting[k][0]) if fitting else None
                    chose = doc["chosen"]
                    chose_key = (chose["strategy"], json.dumps(chose["options"], sort_keys=True),
                                 chose["world_size"]) if chose else None
                    mine = measured.get(chose_key, (0.0,))[0] if chose_key else 0.0
                    best = fitting[best_key][0] if best_key else 0.0
                    ratio = mine / best if best else 0.0
                    # A choice whose measured peak is over the budget would not have run: wrong,
                    # however fast (its ratio can then exceed 1: it is not among those that fit).
                    fits = chose_key in fitting
                    total += 1
                    right += fits and ratio >= 0.9
                    decided += seconds
                    searched += search_s
                    label = lambda k: f"{k[0]} ×{k[2]} {k[1]}" if k else "—"  # noqa: E731
                    row = (f"| {workload} | {world} | {'none' if budget is None else f'{budget:.2f} GB'} | "
                           f"{label(chose_key)}{'' if fits else ' (measured peak over the budget)'} | {mine:,.0f} | "
                           f"{label(best_key)} | {best:,.0f} | {ratio:.2f} | "
                           f"{seconds:.0f} | {search_s:.0f} |")
                    rows.append(row)
                    print(row, flush=True)
                    kept.append({"workload": workload, "world_size": world, "budget_gb": budget,
                                 "chosen": chose_key and list(chose_key), "decision_s": seconds,
                                 "candidates": [{"strategy": c["strategy"], "options": c["options"],
                                                 "predicted_samples_per_s": c["samples_per_s"],
                                                 "predicted_memory_bytes": c["memory_bytes"],
                                                 "measured": measured.get((c["strategy"],
                                                                           json.dumps(c["options"], sort_keys=True)))}
                                                for c in doc["candidates"]]})
    summary = (f"auto within 10% of the fastest in {right} of {total} scenarios; decisions took {decided:.0f} s "
               f"against {searched:.0f} s of exhaustive measurement ({decided / max(searched, 1e-9):.0%})")
    print(summary)
    if args.out:
        args.out.write_text("\n".join(rows) + "\n\n" + summary + "\n")
    if args.json:
        args.json.write_text(json.dumps(kept, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
