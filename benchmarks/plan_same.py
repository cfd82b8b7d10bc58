"""`scaletrain plan --json` (and `plan --choose --json`) of two versions of scaletrain on the
same measurements: are the predictions the same?

    python benchmarks/plan_same.py [--old-rev 50d36d7 | --old DIR] [--recorded DIR] [--workloads a,b,...] [--out DIR]

The earlier version is `--old DIR` (a copy of its tree) or, by default, `git archive` of
`--old-rev` unpacked into a temporary folder. The measurements are recorded once, by the
earlier version's own `plan --json` (one per workload, two probe rounds; under `flock
/tmp/scaletrain-cpu.lock`), or read from `--recorded DIR` (WORKLOAD.json files a previous run
kept with `--keep DIR`). Then each version runs `plan --json` and `plan --choose --json` in a
process of its own, its measuring step replaced by those recorded rounds, so that both predict
from the same numbers. For every prediction (strategy, world size, mesh) the figures are
compared as the plan prints them (step and communication in ms to 0.1, samples/s to 1,
speedup to 0.01×, efficiency to 1%, memory to 3 digits, fits, note), and as numbers (the
largest relative difference of any figure); the conclusions, the chosen configuration and its
flags, line by line. Exits 1 when anything printed differs. `--out DIR` also writes the table
(plan-same.md) and keeps the measurements there (DIR/recorded/), e.g. on a GPU machine, where
the predictions' CUDA paths are the ones compared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = "/tmp/scaletrain-cpu.lock"
WORKLOADS = ("synthetic-cnn", "synthetic-mlp", "digits-cnn", "digits-mlp", "stdlib-gpt")

#: Run inside each version's process: that version's planner, its measurement replaced by the
#: recorded rounds (wherever that version measures: the plan package's evidence step, or the
#: earlier command module's helpers).
DRIVER = r"""
import json, sys
recorded, argv = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
from scaletrain.plan.probe import probe_from_dict
probes = [probe_from_dict(d) for d in recorded["probes"]]
try:
    from scaletrain.plan import evidence
    evidence.measured = lambda *args, **kwargs: evidence.Measured(list(probes))
except ImportError:
    from scaletrain.cli import plan_cmd
    from scaletrain.plan.rounds import PlanRounds
    plan_cmd.measure_rounds = lambda *args, **kwargs: PlanRounds(list(probes))
    plan_cmd.measured_probes = lambda *args, **kwargs: list(probes)
from scaletrain.cli import main
sys.exit(main(argv))
"""


def gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.3g} MB"


def printed(p: dict) -> tuple:
    """A prediction's figures as `scaletrain plan` prints them."""
    return (f"{p['step_s'] * 1e3:.1f}", f"{p['exposed_comm_s'] * 1e3:.1f}", f"{p['samples_per_s']:,.0f}",
            f"{p['speedup']:.2f}", f"{p['efficiency']:.0%}", gb(p["memory_bytes"]), p["fits"], p["note"],
            f"{p['compute_s'] * 1e3:.1f}", f"{p['comm_s'] * 1e3:.1f}", p["nodes"], p["threads"], p["global_batch"])


NUMBERS = ("compute_s", "comm_s", "exposed_comm_s", "step_s", "samples_per_s", "speedup", "efficiency",
           "memory_bytes")


def key(p: dict) -> tuple:
    return p["strategy"], p["world_size"], p["mesh"], json.dumps(p["options"], sort_keys=True)


def relative(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def run_version(tree: Path, recorded: Path, argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory() as cache:  # a choice's cache of probes never leaks between versions
        env["XDG_CACHE_HOME"] = cache
        done = subprocess.run([sys.executable, "-c", DRIVER, str(recorded), json.dumps(argv)], env=env,
                              capture_output=True, text=True, timeout=600, cwd=tree)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{tree}: plan {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def compare_plans(old: dict, new: dict) -> tuple[list[str], float, int]:
    """(differences as the plan prints them, the largest relative difference, predictions compared)."""
    diffs, worst = [], 0.0
    mine = {key(p): p for p in new["predictions"]}
    for p in old["predictions"]:
        q = mine.pop(key(p), None)
        if q is None:
            diffs.append(f"{key(p)}: predicted by the earlier version only")
            continue
        worst = max([worst, *(relative(p[n], q[n]) for n in NUMBERS)])
        if printed(p) != printed(q) or p.get("speedup_interval") and [f"{v:.2f}" for v in p["speedup_interval"]] != \
                [f"{v:.2f}" for v in q["speedup_interval"]]:
            diffs.append(f"{key(p)}: {printed(p)} != {printed(q)}")
    diffs += [f"{k}: predicted by the new version only" for k in mine]
    for a, b in zip(old["conclusions"], new["conclusions"]):
        if a != b:
            diffs.append(f"conclusion: {a!r} != {b!r}")
    if len(old["conclusions"]) != len(new["conclusions"]):
        diffs.append("conclusions: not as many lines")
    return diffs, worst, len(old["predictions"])


def compare_choices(old: dict, new: dict) -> list[str]:
    diffs = [f"{name}: {old[name]!r} != {new[name]!r}" for name in ("flags", "lines", "considered", "tight")
             if old[name] != new[name]]
    if old["chosen"] and new["chosen"] and printed(old["chosen"]) != printed(new["chosen"]):
        diffs.append(f"chosen: {printed(old['chosen'])} != {printed(new['chosen'])}")
    return diffs


def record(old_tree: Path, folder: Path, workload: str) -> Path:
    out = folder / f"{workload}.json"
    if out.exists():
        return out
    env = {**os.environ, "PYTHONPATH": str(old_tree)}
    subprocess.run(["flock", LOCK, sys.executable, "-m", "scaletrain", "plan", "--workload", workload, "--json",
                    "--probe-rounds", "2", "--budget", "1", "--out", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL, cwd=old_tree, timeout=1800)
    return out


def old_tree_of(rev: str, into: Path) -> Path:
    tree = into / f"scaletrain-{rev}"
    tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old-rev", default="50d36d7", help="the earlier version's git revision (default 50d36d7)")
    p.add_argument("--old", type=Path, help="a copy of the earlier version's tree instead of --old-rev")
    p.add_argument("--recorded", type=Path, help="WORKLOAD.json measurements recorded before (--keep)")
    p.add_argument("--keep", type=Path, help="keep the recorded measurements in this folder")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--out", type=Path, help="write the table to DIR/plan-same.md and keep the measurements in DIR")
    args = p.parse_args()
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    with tempfile.TemporaryDirectory(prefix="plan-same-") as tmp:
        old_tree = args.old.resolve() if args.old else old_tree_of(args.old_rev, Path(tmp))
        folder = (args.recorded or args.keep or (args.out / "recorded" if args.out else Path(tmp) / "recorded")).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        failed = False
        say(f"earlier: {old_tree}; new: {REPO}; measurements: {folder}")
        say("| workload | predictions | printed differently | largest relative difference | conclusions | --choose |")
        say("|---|---:|---:|---:|---|---|")
        for workload in args.workloads.split(","):
            recorded = record(old_tree, folder, workload)
            plan = ["plan", "--workload", workload, "--json"]
            choose = ["plan", "--workload", workload, "--json", "--choose", "--world-sizes", "2"]
            plan_diffs, worst, count = compare_plans(run_version(old_tree, recorded, plan),
                                                     run_version(REPO, recorded, plan))
            choice_diffs = compare_choices(run_version(old_tree, recorded, choose), run_version(REPO, recorded, choose))
            printed_differently = [d for d in plan_diffs if not d.startswith("conclusion")]
            say(f"| {workload} | {count} | {len(printed_differently)} | {worst:.1e} | "
                f"{'same' if not any(d.startswith('conclusion') for d in plan_diffs) else 'DIFFER'} | "
                f"{'same' if not choice_diffs else 'DIFFER'} |")
            for line in plan_diffs + choice_diffs:
                say(f"    {workload}: {line}")
            failed |= bool(plan_diffs or choice_diffs)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "plan-same.md").write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
