"""The measurements a plan starts from: one process's step time at each thread count it
will need, the model's byte counts, and the all-reduce's latency and bus bandwidth."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..measure.clock import Clock, median
from ..measure.footprint import Footprint, measure_footprint
from ..measure.steps import SYNC, breakdown, forever, timed_steps


@dataclass(frozen=True)
class Link:
    """The all-reduce's cost: alpha seconds per ring step, busbw bytes per second."""
    alpha_s: float
    busbw: float
    nproc: int
    source: str


@dataclass
class Probe:
    workload: str
    batch_size: int
    device_type: str
    cores: int
    step_s: dict = field(default_factory=dict)
    """threads -> median seconds of one step of one process (data + forward/backward + optimizer)."""
    parts: dict = field(default_factory=dict)
    """threads -> that step's breakdown."""
    footprint: Optional[Footprint] = None
    link: Optional[Link] = None

    def as_dict(self) -> dict:
        return asdict(self)


def measure_compute(workload, batch_size: int, threads_list: list[int], steps: int, warmup: int, seed: int,
                    device: Optional[str], rounds: int = 2) -> tuple[dict, dict, Footprint]:
    """One process, the `single` strategy, at each thread count in turn; `rounds` passes
    over the thread counts, alternating, so that load from elsewhere hits them alike."""
    from ..api import init

    walls: dict[int, list[float]] = {t: [] for t in threads_list}
    parts: dict[int, list[dict]] = {t: [] for t in threads_list}
    footprint = None
    for _ in range(rounds):
        for threads in threads_list:
            with init(strategy="single", device=device, threads=threads, seed=seed) as run:
                train_set, _ = workload.build_datasets(seed)
                model = workload.build_model()
                optimizer = torch.optim.Adam(model.parameters(), lr=workload.lr)
                model, optimizer = run.setup(model, optimizer)
                batches = forever(run.loader(train_set, batch_size=batch_size, shuffle=True, drop_last=True))
                clock = Clock(run.device)
                timed_steps(run, model, optimizer, batches, F.cross_entropy, [SYNC] * (warmup + steps), clock)
                walls[threads].extend(clock.step_walls(SYNC, warmup))
                parts[threads].append(breakdown(clock, warmup))
                if footprint is None:
                    inputs, targets = next(batches)
                    footprint = measure_footprint(run.unwrap(model), optimizer, inputs, targets, F.cross_entropy)
    step_s = {t: median(w) for t, w in walls.items()}
    merged = {t: {k: median([p[k] for p in ps]) for k in ps[0]} for t, ps in parts.items()}
    return step_s, merged, footprint


def link_from_rows(rows: list[dict], message_bytes: float, source: str) -> Link:
    """Latency from the smallest all_reduce, bus bandwidth from the one nearest in size to
    the message the strategy will send, with the latency taken out."""
    reduces = sorted((r for r in rows if r.get("op") == "all_reduce"), key=lambda r: r["bytes"])
    if not reduces:
        raise UsageError(f"{source} has no all_reduce results; make it with `scaletrain comm --ops all_reduce --json`")
    n = reduces[0]["world_size"]
    small = reduces[0]
    alpha = small["seconds"] / (2 * (n - 1))
    big = min(reduces[1:] or reduces, key=lambda r: abs(math.log(r["bytes"] / max(message_bytes, 1))))
    factor = 2 * (n - 1) / n
    extra = big["seconds"] - small["seconds"]
    busbw = big["bytes"] * factor / extra if big is not small and extra > 0 else big["bytes"] * factor / big["seconds"]
    return Link(alpha_s=alpha, busbw=busbw, nproc=n, source=source)


def load_comm_json(path: Path, message_bytes: float) -> Link:
    try:
        doc = json.loads(Path(path).read_text())
        rows = doc["results"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--comm {path}: not a `scaletrain comm --json` result ({exc}); "
                         "make one with `scaletrain comm --ops all_reduce --json > comm.json`") from None
    return link_from_rows(rows, message_bytes, f"{path}")


def measure_link(message_bytes: float, nproc: int, backend: Optional[str], device: Optional[str]) -> Link:
    """A quick all_reduce probe on `nproc` processes of this machine: a 4 KB message for the
    latency and one of the gradients' size for the bandwidth."""
    from ..launch.spawn import spawn

    size = max(64 * 1024, int(message_bytes))
    with tempfile.TemporaryDirectory(prefix="scaletrain-probe-") as tmp:
        out = Path(tmp) / "comm.json"
        argv = ["comm", "--ops", "all_reduce", "--sizes", f"4K,{size}", "--iters", "20", "--quiet",
                "--out", str(out)]
        if backend:
            argv += ["--backend", backend]
        if device:
            argv += ["--device", device]
        code = spawn(argv, nproc)
        if code != 0 or not out.exists():
            raise RuntimeError(f"the all_reduce probe on {nproc} processes failed (exit {code})")
        rows = json.loads(out.read_text())["results"]
    return link_from_rows(rows, message_bytes, f"all_reduce probe, {nproc} processes")


def cores_here() -> int:
    from ..devices import cpu_cores

    return cpu_cores()


def device_memory_bytes(device_type: str, procs_per_node: int) -> float:
    """What one process may use: the GPU's memory, or the machine's memory ÷ processes."""
    if device_type == "cuda":
        return float(torch.cuda.get_device_properties(0).total_memory)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return float("inf")
    return total / max(1, procs_per_node)
