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
from ..measure.clock import median
from ..measure.footprint import Footprint, measure_footprint
from ..measure.steps import forever


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
    footprint: Optional[Footprint] = None
    link: Optional[Link] = None

    def as_dict(self) -> dict:
        return asdict(self)


def measure_compute(workload, spec: dict, threads_list: list[int], copies: dict, steps: int, warmup: int,
                    rounds: int = 2) -> tuple[dict, Footprint]:
    """Step time for each thread count, measured with as many copies running at once as
    the predictions put on one machine (`copies[threads]`), in `rounds` alternating passes
    so that load from elsewhere hits every thread count alike; and the model's footprint."""
    from .corun import corun_step_walls, slowest_per_step

    walls: dict[int, list[float]] = {t: [] for t in threads_list}
    for _ in range(rounds):
        for threads in threads_list:
            measured = corun_step_walls(copies[threads], {**spec, "threads": threads, "steps": steps,
                                                          "warmup": warmup})
            walls[threads].extend(slowest_per_step(measured))
    return {t: median(w) for t, w in walls.items()}, measure_model_footprint(workload, spec)


def measure_model_footprint(workload, spec: dict) -> Footprint:
    """Byte counts after one real step (so the optimizer's state exists), in this process."""
    from ..api import init

    with init(strategy="single", device=spec["device"], threads=None, seed=spec["seed"], environ={}) as run:
        train_set, _ = workload.build_datasets(spec["seed"])
        model = workload.build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=workload.lr)
        model, optimizer = run.setup(model, optimizer)
        batches = forever(run.loader(train_set, batch_size=spec["batch_size"], shuffle=True, drop_last=True))
        inputs, targets = next(batches)
        run.train_step(model, optimizer, inputs, targets, F.cross_entropy)
        return measure_footprint(run.unwrap(model), optimizer, inputs, targets, F.cross_entropy)


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
    from ..launchers.facade import spawn

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
