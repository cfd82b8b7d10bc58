"""Multi-host predictions against multi-host measurements, on the test bed's two hosts.

    sudo python benchmarks/multihost_check.py [--links 10gbit,1gbit,1gbit+2ms] [--runs 3] [--budget 120]

Brings up the two namespace hosts of testbed/netns.sh (10.77.0.1, 10.77.0.2), gives each a core
of its own (`netns.sh pin on`: two hosts that share the cores would compete as no two
machines do), and for every link setting (`netns.sh shape RATE [DELAY]`: a rate, and with
RATE+DELAY that one-way delay too, by tc netem or, on kernels without it, the test bed's delay
line) runs, from host 10.77.0.1,
`--runs` times:

  scaletrain bench --hosts 10.77.0.1:1,10.77.0.2:1 --strategy ddp,fsdp,pipeline
      (a process on each host: data parallel across them, FSDP across them, a stage on each)
  scaletrain bench --workload stdlib-gpt --hosts 10.77.0.1:2,10.77.0.2:2 --strategy fsdp --tp 2
      (tensor parallel inside each host, FSDP across them)

Each bench measures the one-process reference on host 10.77.0.1 and the configurations across
both hosts (mpirun), and in every round the plan's measurements — among them the all_reduce
between the hosts, one process on each — from which the predictions are made. The table shows,
per link and configuration, the median over the runs of the predicted and of the measured
speedup and the error of the medians. Exits 1 when an error is beyond --tolerance (15%).
Runs under `flock /tmp/scaletrain-heavy.lock`; tears the namespaces down however it ends.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NETNS = REPO / "testbed" / "netns.sh"
AGENT = REPO / "testbed" / "mpi-ssh-agent"
LOCK = "/tmp/scaletrain-heavy.lock"
HOST0, HOST1 = "10.77.0.1", "10.77.0.2"

sys.path.insert(0, str(REPO))

from scaletrain.plan.machine import default_machine  # noqa: E402
from scaletrain.plan.predict import predict  # noqa: E402
from scaletrain.plan.probe import probe_from_dict  # noqa: E402

SUITES = {
    "across": ["--workload", "synthetic-cnn", "--hosts", f"{HOST0}:1,{HOST1}:1", "--strategy", "ddp,fsdp,pipeline"],
    "tp-inside": ["--workload", "stdlib-gpt", "--hosts", f"{HOST0}:2,{HOST1}:2", "--strategy", "fsdp", "--tp", "2"],
}


def netns(*argv: str) -> None:
    subprocess.run([str(NETNS), *argv], check=True, capture_output=True, text=True, timeout=60)


def bench(suite: list[str], out: Path, budget: float) -> dict:
    env = dict(os.environ, OMPI_MCA_plm_rsh_agent=str(AGENT), TORCH_CPP_LOG_LEVEL="ERROR")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [str(NETNS), "exec", "node0", sys.executable, "-m", "scaletrain", "bench", *suite,
           "--budget", f"{budget:g}", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=budget * 4 + 600, env=env, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    return json.loads((out / "bench.json").read_text())


def predicted_again(doc: dict, config: dict, reference: dict) -> float:
    """The median over the rounds of the predicted speedup of `config` over `reference`, made
    again from each round's recorded measurements with the cost model as it is now (as
    plan_vs_bench.py does), where the processes ran: the hosts' slots per machine, the
    bench's cores."""
    slots = max(1, config["world_size"] // 2)
    options = dataclasses.replace(default_machine("cpu", nproc_per_node=slots), cores=doc["cores"])
    ratios = []
    for recorded in doc["probes"]:
        probe = probe_from_dict(recorded)
        mine = predict(probe, config["strategy"], config["world_size"], options, config.get("options") or {})
        theirs = predict(probe, reference["strategy"], reference["world_size"], options,
                         reference.get("options") or {})
        ratios.append(mine.samples_per_s / theirs.samples_per_s)
    return statistics.median(ratios)


def rows_of(doc: dict) -> list[dict]:
    """Each configuration of several processes: its measured median speedup and the predicted."""
    reference = next(c for c in doc["configurations"] if c["label"] == doc["reference"])
    rows = []
    for c in doc["configurations"]:
        if c["world_size"] > 1 and c.get("speedup"):
            rows.append({"config": c["label"], "measured": c["speedup"]["median"],
                         "predicted": predicted_again(doc, c, reference), "rounds": c["rounds"]})
    return rows


def network_of(doc: dict) -> dict:
    """The link between the hosts as the rounds measured it: median α and large-message busbw."""
    nets = [p["network"] for p in doc.get("probes", []) if p.get("network")]
    if not nets:
        return {}
    return {"alpha_us": statistics.median(n["alpha_s"] for n in nets) * 1e6,
            "busbw_gbps": statistics.median(n["busbw"] for n in nets) * 8 / 1e9}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--links", default="10gbit,1gbit,200mbit", help="tc rates, comma-separated, each with a "
                   "one-way delay after a + if wanted: 1gbit+2ms (default 10gbit,1gbit,200mbit)")
    p.add_argument("--suites", default=",".join(SUITES), help=f"of {', '.join(SUITES)} (default both)")
    p.add_argument("--runs", type=int, default=3, help="bench runs per link and suite (default 3)")
    p.add_argument("--budget", type=float, default=120, help="each bench's --budget, seconds (default 120)")
    p.add_argument("--tolerance", type=float, default=0.15)
    p.add_argument("--json", type=Path, help="write every run's figures here")
    p.add_argument("--keep", type=Path, help="keep the bench folders here")
    p.add_argument("--from", dest="recorded", type=Path, help="read the bench folders kept in DIR (--keep) "
                   "instead of running new ones; each named LINK-SUITE-RUN")
    args = p.parse_args()
    if args.recorded:
        return report(recorded_runs(args.recorded), args)
    if os.geteuid() != 0:
        print("multihost_check: the two hosts are network namespaces, which need root", file=sys.stderr)
        return 2
    lock = open(LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # nothing else measuring meanwhile
    runs: dict = {}
    with tempfile.TemporaryDirectory(prefix="multihost-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        netns("up")
        try:
            netns("pin", "on")
            for link in args.links.split(","):
                netns("shape", *link.split("+"))  # RATE or RATE+DELAY (each way)
                for i in range(args.runs):
                    for suite in args.suites.split(","):
                        doc = bench(SUITES[suite], folder / f"{link}-{suite}-{i}", args.budget)
                        net = network_of(doc)
                        for row in rows_of(doc):
                            runs.setdefault((link, row["config"]), []).append({**row, **net})
                            print(f"{link} run {i + 1}: {row['config']}: predicted {row['predicted']:.3f}×, measured "
                                  f"{row['measured']:.3f}× ({row['rounds']} rounds); link α "
                                  f"{net.get('alpha_us', 0):.0f} µs, {net.get('busbw_gbps', 0):.2f} Gbit/s", flush=True)
        finally:
            netns("down")
    return report(runs, args)


def recorded_runs(folder: Path) -> dict:
    runs: dict = {}
    for path in sorted(folder.glob("*/bench.json")):
        link = path.parent.name.split("-")[0]
        doc = json.loads(path.read_text())
        for row in rows_of(doc):
            runs.setdefault((link, row["config"]), []).append({**row, **network_of(doc)})
    return runs


def report(runs: dict, args) -> int:
    print("\n| link | configuration | runs | predicted (median) | measured (median) | error | link measured |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for (link, config), rs in runs.items():
        predicted = statistics.median(r["predicted"] for r in rs)
        measured = statistics.median(r["measured"] for r in rs)
        error = predicted / measured - 1
        worst = max(worst, abs(error))
        alpha = statistics.median(r.get("alpha_us", 0) for r in rs)
        bw = statistics.median(r.get("busbw_gbps", 0) for r in rs)
        print(f"| {link} | {config} | {len(rs)} | {predicted:.2f}× | {measured:.2f}× | {error:+.0%} | "
              f"α {alpha:.0f} µs, {bw:.2f} Gbit/s |")
    if args.json:
        args.json.write_text(json.dumps({f"{k[0]} {k[1]}": v for k, v in runs.items()}, indent=2))
    print(f"\nworst error of the medians: {worst:.0%} (tolerance {args.tolerance:.0%})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
