"""Sharded (torch.distributed.checkpoint) checkpoints of an fsdp model, as one job of a test
or of benchmarks/checkpoint_memory.py.

    python sharded_worker.py save DIR [--width W] [--layout sharded|full]   # under torchrun or alone
    python sharded_worker.py load DIR --from SRC [--width W]
    python sharded_worker.py die DIR                                         # torchrun, 2 processes

save: trains 3 steps, then saves into DIR/ckpt in the given layout, measuring rank 0's peak
resident memory during the save (the peak is reset just before it, via /proc/self/clear_refs),
and writes a full-layout copy of the same state into DIR/reference for comparison.
load: resumes SRC (a sharded checkpoint written by another number of processes) and checks
that model and optimizer now hold exactly the reference's state, then saves again (sharded)
into DIR/ckpt with a fresh reference beside it.
die: saves step 1 sharded (and its reference), then rank 1 kills itself (SIGKILL) as it
starts writing its share of step 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

import scaletrain
from scaletrain.checkpoint import load_state, resolve_source
from scaletrain.parallel.model_state import full_state


def model(width: int) -> nn.Sequential:
    return nn.Sequential(OrderedDict(
        fc1=nn.Sequential(nn.Linear(64, width), nn.ReLU()),
        fc2=nn.Sequential(nn.Linear(width, width), nn.ReLU()),
        fc3=nn.Linear(width, 10),
    ))


def peak_kib() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def rss_kib() -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def train(run, net, optimizer, steps: int) -> None:
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        x, y = torch.randn(16, 64, generator=gen), torch.randint(0, 10, (16,), generator=gen)
        share = slice(run.rank, None, run.world_size)
        run.train_step(net, optimizer, x[share], y[share])


def same_as_reference(run, net, optimizer, reference: Path) -> None:
    mine = full_state(run.unwrap(net), optimizer)
    if run.rank == 0:
        saved = load_state(resolve_source(reference) / "state.pt")
        for part in ("model", "optimizer"):
            assert saved[part].keys() == mine[part].keys(), part
            for key, value in saved[part].items():
                other = mine[part][key]
                ok = torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other
                assert ok, f"{part} {key} differs after loading"


def save(run, net, optimizer, folder: Path, layout: str) -> dict:
    state_bytes = sum(p.numel() * p.element_size() for p in run.unwrap(net).parameters()) * 3  # + Adam's two
    before = rss_kib()
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    run.save_checkpoint(folder / "ckpt", net, optimizer, layout=layout)
    peak = peak_kib()
    run.save_checkpoint(folder / "reference", net, optimizer, layout="full")
    return {"layout": layout, "world_size": run.world_size, "state_bytes": state_bytes,
            "peak_increase_bytes": (peak - before) * 1024}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["save", "load", "die"])
    p.add_argument("dir", type=Path)
    p.add_argument("--from", dest="source", type=Path)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layout", default="sharded")
    args = p.parse_args()
    with scaletrain.init(strategy="fsdp", seed=0) as run:
        net = model(args.width)
        net, optimizer = run.setup(net, torch.optim.Adam(net.parameters(), lr=1e-3))
        if args.action == "load":
            resumed = run.load_checkpoint(args.source / "ckpt", net, optimizer)
            same_as_reference(run, net, optimizer, args.source / "reference")
            run.print(f"restored step {resumed['step']} saved by {resumed['world_size']} process(es) "
                      f"into {run.world_size}")
            train(run, net, optimizer, 2)
            save(run, net, optimizer, args.dir, "sharded")
            return
        if args.action == "die":
            train(run, net, optimizer, 1)
            save(run, net, optimizer, args.dir, "sharded")
            run.print("saved step 1", flush=True)
            if run.rank == 1:
                import torch.distributed.checkpoint.filesystem as fs

                real = fs._write_item

                def die_while_writing(*a, **k):
                    os.kill(os.getpid(), signal.SIGKILL)
                    return real(*a, **k)
                fs._write_item = die_while_writing
            train(run, net, optimizer, 1)
            run.save_checkpoint(args.dir / "ckpt", net, optimizer, layout="sharded")
            run.print("not killed?!")
            return
        train(run, net, optimizer, 3)
        facts = save(run, net, optimizer, args.dir, args.layout)
        if run.rank == 0:
            print("MEMORY " + json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
