"""How long a checkpoint stops training: synchronous saves against `--checkpoint-async`.

    python benchmarks/checkpoint_async.py [--width 3072] [--layers 6] [--nproc 2] [--saves 4] [--rounds 2]

A model whose synchronous save takes more than a second here: an MLP of `--layers` square
layers of `--width` (width 3072, 6 layers: 57 M parameters, 680 MB of parameters and Adam
state). Each configuration (`--configs`: fsdp with the sharded layout; ddp with the full one,
written by rank 0; fsdp with the full one, whose state is gathered onto rank 0 inside the
step) is a fresh torchrun job of `--nproc` processes, alternating synchronous and asynchronous
jobs for `--rounds` rounds: 2 warm-up steps, then `--saves` times a checkpoint and
`--steps-between` (5) training steps. The stall is the time the training loop spends inside `save()` (for async: the
wait for the previous save, if any, and the copy into host memory); the steps that follow an
asynchronous save run while its files are written, and their slowdown against steps with no
save in flight is reported too (on a CPU the writing thread competes with training for the
cores; on a GPU it does not compete with the GPU's work). Medians over every save of every
round; the first asynchronous save of a job, which allocates the host copy, is given apart.
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

WARMUP = 2


def worker(args) -> None:
    import torch
    from torch import nn

    import scaletrain

    with scaletrain.init(strategy=args.strategy, seed=0) as run:
        layers = [nn.Sequential(nn.Linear(args.width, args.width), nn.Tanh()) for _ in range(args.layers)]
        net = nn.Sequential(*layers)
        net, optimizer = run.setup(net, torch.optim.Adam(net.parameters(), lr=1e-4))
        ckpt = run.checkpointer(Path(args.dir) / "ckpt", keep=2, layout=args.layout,
                                asynchronous=args.mode == "async")
        gen = torch.Generator().manual_seed(run.rank)
        x = torch.randn(16, args.width, generator=gen)

        def step() -> float:
            began = time.perf_counter()
            run.train_step(net, optimizer, x, x, torch.nn.functional.mse_loss)
            return time.perf_counter() - began

        for _ in range(WARMUP):
            step()
        stalls, after_save, quiet, previous_in_flight = [], [], [], []
        for _ in range(args.saves):
            previous_in_flight.append(ckpt.in_flight)  # then the stall includes waiting for it
            began = time.perf_counter()
            ckpt.save(run.steps_taken, net, optimizer)
            stalls.append(time.perf_counter() - began)
            for i in range(args.steps_between):
                in_flight = ckpt.in_flight
                (after_save if in_flight else quiet).append(step())
        began = time.perf_counter()
        ckpt.wait()
        final_wait = time.perf_counter() - began
        state_bytes = 3 * sum(p.numel() * p.element_size() for p in run.unwrap(net).parameters())
        if run.rank == 0:
            print("RESULT " + json.dumps({"mode": args.mode, "layout": args.layout, "strategy": args.strategy, "stalls": stalls,
                                          "steps_during_write": after_save,
                                          "previous_in_flight": previous_in_flight, "steps_quiet": quiet,
                                          "final_wait": final_wait, "state_bytes_per_rank": state_bytes,
                                          "world_size": run.world_size}), flush=True)


def job(mode: str, strategy: str, layout: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="scaletrain-ckpt-async-") as tmp:
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                               str(args.nproc), __file__, "--worker", "--mode", mode, "--strategy", strategy, "--layout", layout,
                               "--dir", tmp,
                               "--width", str(args.width), "--layers", str(args.layers), "--saves", str(args.saves),
                               "--steps-between", str(args.steps_between)],
                              capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise SystemExit(f"the {mode} {strategy} {layout} job failed:\n{done.stderr[-3000:]}")
        line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
        return json.loads(line[len("RESULT "):])


def summarise(results: list[dict], config: str) -> dict:
    strategy, layout = config.split(":")
    mine = [r for r in results if r["strategy"] == strategy and r["layout"] == layout]
    sync = [r for r in mine if r["mode"] == "sync"]
    asyn = [r for r in mine if r["mode"] == "async"]
    sync_stall = statistics.median(s for r in sync for s in r["stalls"])
    first = statistics.median(r["stalls"][0] for r in asyn)
    later = statistics.median(s for r in asyn for s in r["stalls"][1:])
    unhindered = [s for r in asyn for s, busy in zip(r["stalls"][1:], r["previous_in_flight"][1:]) if not busy]
    waited = sum(busy for r in asyn for busy in r["previous_in_flight"][1:])
    quiet = statistics.median(s for r in asyn for s in r["steps_quiet"]) if any(r["steps_quiet"] for r in asyn) else None
    during = statistics.median(s for r in asyn for s in r["steps_during_write"]) if any(
        r["steps_during_write"] for r in asyn) else None
    sync_steps = statistics.median(s for r in sync for s in r["steps_quiet"])
    return {"strategy": strategy, "layout": layout, "sync_save_s": sync_stall, "async_first_stall_s": first, "async_stall_s": later,
            "stall_ratio": later / sync_stall, "async_stall_unhindered_s": statistics.median(unhindered) if unhindered
            else None, "saves_that_waited": waited, "async_later_saves": sum(len(r["stalls"]) - 1 for r in asyn), "step_s": sync_steps, "step_during_write_s": during,
            "step_quiet_async_s": quiet, "state_bytes_per_rank": sync[0]["state_bytes_per_rank"],
            "saves": sum(len(r["stalls"]) for r in sync)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=3072)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--saves", type=int, default=4)
    p.add_argument("--steps-between", type=int, default=5, help="training steps between two checkpoints")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--configs", default="fsdp:sharded,ddp:full,fsdp:full",
                   help="strategy:layout pairs (fsdp:full gathers the whole state onto rank 0 first, in the step)")
    p.add_argument("--strategy", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help="also write the results as JSON and Markdown into this folder")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--layout", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    configs = args.configs.split(",")
    results = []
    for _ in range(args.rounds):
        for config in configs:
            strategy, layout = config.split(":")
            for mode in ("sync", "async"):
                results.append(job(mode, strategy, layout, args))
    rows = [summarise(results, config) for config in configs]
    params = args.width * (args.width + 1) * args.layers
    lines = [f"{args.nproc} processes, MLP of {args.layers} × {args.width}: {params / 1e6:.1f} M parameters, "
             f"{3 * 4 * params / 1e6:,.0f} MB of parameters and Adam state; {args.rounds} round(s) × {args.saves} "
             "saves per configuration",
             "",
             "| strategy | layout | synchronous save | async stall (first save) | async stall | stall ÷ sync save | "
             "later saves that waited for the previous | step | step while writing |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        during = f"{r['step_during_write_s'] * 1e3:,.0f} ms" if r["step_during_write_s"] else "–"
        lines.append(f"| {r['strategy']} | {r['layout']} | {r['sync_save_s']:.2f} s | {r['async_first_stall_s']:.2f} s | "
                     f"{r['async_stall_s']:.3f} s | {r['stall_ratio']:.0%} | "
                     f"{r['saves_that_waited']} of {r['async_later_saves']} | {r['step_s'] * 1e3:,.0f} ms | {during} |")
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "checkpoint_async.json").write_text(json.dumps({"rows": rows, "jobs": results}, indent=1))
        (args.out / "checkpoint_async.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
