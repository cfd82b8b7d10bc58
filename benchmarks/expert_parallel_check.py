"""Expert parallel's plan against measurement: the step of ep 2 (fsdp over two processes, each
holding half of stdlib-moe's experts) predicted by `scaletrain plan`'s terms and measured, and
for comparison the same two processes without expert parallel (FSDP shards every expert).

    flock /tmp/heavy.lock python benchmarks/expert_parallel_check.py [--seq-len 64] [--batch-size 32] [--out DIR]

`scaletrain bench` measures one process, fsdp × 2 with `--ep 2`, and (second run) fsdp × 2
alone, in rounds, each round with the plan's own measurements, and reports each configuration's
predicted step next to the measured one: medians over `--rounds` (3). The check: ep 2's
prediction within 15% of its measurement. The defaults are a user's (`scaletrain bench` with no
memory flags). Prints a Markdown table (also to --out/expert_parallel_check.md, with the JSON).
Runs on a shared machine: the table says how busy it was. `--dry-run` runs everything tiny (batch
4, 2 steps, 1 round), to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

STEP_WITHIN = 0.15


def scaletrain(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "scaletrain", *argv], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())
    if done.returncode != 0:
        raise SystemExit(f"scaletrain {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def bench(args, folder: Path, name: str, flags: list[str]) -> dict:
    """{configuration label: {"measured", "predicted", values...}} of one `scaletrain bench` run."""
    out = folder / name
    scaletrain(["bench", "--workload", "stdlib-moe", "--seq-len", str(args.seq_len), "--batch-size",
                str(args.batch_size), *flags, "--rounds", str(args.rounds), "--steps", str(args.steps), "--warmup", "2",
                "--out", str(out)], timeout=3600)
    doc = json.loads((out / "bench.json").read_text())
    found = {}
    for row in doc["configurations"]:
        found[f"{row['strategy']} ×{row['world_size']}"] = {
            "measured_step_s": row["step_s"]["median"], "measured_values": row["step_s"]["values"],
            "predicted_step_s": (row.get("predicted_step_s") or {}).get("median"),
            "predicted_values": (row.get("predicted_step_s") or {}).get("values")}
    found["rounds_left_out"] = len(doc.get("rounds_left_out", []))
    return found


def table(args, ep: dict, plain: dict, load: float) -> tuple[str, bool]:
    rows = [("one process", ep["single ×1"]), ("fsdp × 2, ep 2", ep["fsdp ×2"]), ("fsdp × 2 (no ep)", plain["fsdp ×2"])]
    lines = [f"stdlib-moe (8 experts, top-2), {args.seq_len} tokens per sequence, batch {args.batch_size} per "
             f"process; medians of {args.rounds} rounds; the defaults",
             "",
             "| configuration | step, plan (ms) | step, measured (ms) | error |",
             "|---|---:|---:|---:|"]
    for label, row in rows:
        predicted, measured = row["predicted_step_s"], row["measured_step_s"]
        error = f"{predicted / measured - 1:+.1%}" if predicted else "—"
        shown = f"{predicted * 1e3:,.0f}" if predicted else "—"
        lines.append(f"| {label} | {shown} | {measured * 1e3:,.0f} | {error} |")
    ep_row = ep["fsdp ×2"]
    ok = ep_row["predicted_step_s"] is not None and \
        abs(ep_row["predicted_step_s"] / ep_row["measured_step_s"] - 1) <= STEP_WITHIN
    left = ep["rounds_left_out"] + plain["rounds_left_out"]
    lines += ["", f"ep 2's step within {STEP_WITHIN:.0%}: {'yes' if ok else 'no'}. The machine's load average over "
              f"the last 5 minutes at the end: {load:.1f} (bench left out {left} round(s) other processes "
              f"disturbed)."]
    return "\n".join(lines), ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20, help="measured steps per bench run")
    p.add_argument("--rounds", type=int, default=3, help="bench rounds")
    p.add_argument("--out", type=Path)
    p.add_argument("--dry-run", action="store_true", help="tiny sizes: checks the script, not the plan")
    args = p.parse_args()
    if args.dry_run:
        args.batch_size, args.steps, args.rounds = 4, 2, 1
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.out or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        ep = bench(args, folder, "ep2", ["--strategy", "single,fsdp", "--ep", "2", "--world-sizes", "1,2"])
        plain = bench(args, folder, "fsdp", ["--strategy", "fsdp", "--world-sizes", "2"])
        text, ok = table(args, ep, plain, os.getloadavg()[1])
        print(text)
        if args.out:
            (args.out / "expert_parallel_check.md").write_text(text + "\n")
            (args.out / "expert_parallel_check.json").write_text(json.dumps(
                {"ep2": ep, "fsdp": plain, "seq_len": args.seq_len, "batch_size": args.batch_size, "ok": ok},
                indent=2))
    return 0 if ok or args.dry_run else 1


if __name__ == "__main__":
    raise SystemExit(main())
