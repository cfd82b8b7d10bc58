"""The link between a plan's processes: the all-reduce's latency and bus bandwidth at each
message size (FSDP's all-gather and reduce-scatter against a ring's made from it), read from
`scaletrain comm`'s rows — measured by a probe job, or given as `--comm FILE`."""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional


from ..foundation.errors import UsageError
from ..measure.failed import measurement_failed
from .formulas import ring_all_gather_seconds


#: FSDP's collectives, timed beside the all-reduce (their cost beyond a ring's differs by backend).
FSDP_OPS = ("all_gather", "reduce_scatter")


@dataclass(frozen=True)
class Link:
    """The all-reduce's cost on `nproc` processes: alpha seconds per ring step, and the bus
    bandwidth (bytes per second, latency taken out) at each measured message size."""
    alpha_s: float
    busbw: float
    """At the largest message measured (what larger messages get)."""
    nproc: int
    source: str
    points: tuple = ()
    """((bytes, bus bandwidth), ...) per measured size: small messages get less bandwidth."""
    gather_ratio: float = 1.0
    """all_gather's measured time over a ring's made from this all-reduce (FSDP's gathers); 1
    where not measured. NCCL's is about 1; Gloo's is not a ring and takes about twice that."""
    scatter_ratio: float = 1.0
    """The same for reduce_scatter (FSDP's gradients): Gloo's takes longer than an all-reduce."""

    def busbw_for(self, nbytes: float) -> float:
        """The bandwidth measured at the size nearest `nbytes` (on a log scale)."""
        if not self.points:
            return self.busbw
        return min(self.points, key=lambda p: abs(math.log(p[0] / max(nbytes, 1))))[1]

    def fitted(self) -> "Link":
        """The same link with one bandwidth for every size: the least-squares line through the
        sizes' times (latency taken out). Between machines, where the probe times each size
        briefly, a middle size's own figure can be off by 3× either way (its time is a small
        difference of two noisy ones); the line through all of them is not."""
        times = [(b, b / bw) for b, bw in self.points if bw > 0]
        if len(times) < 3:
            return self
        mean_b = sum(b for b, _ in times) / len(times)
        mean_t = sum(t for _, t in times) / len(times)
        spread = sum((b - mean_b) ** 2 for b, _ in times)
        slope = sum((b - mean_b) * (t - mean_t) for b, t in times) / spread if spread > 0 else 0.0
        return replace(self, busbw=1 / slope, points=()) if slope > 0 else self


def link_from_rows(rows: list[dict], source: str) -> Link:
    """Latency from the smallest all_reduce; the bus bandwidth of each larger one with that
    latency taken out; all_gather's and reduce_scatter's times, where measured, against a
    ring's made from them."""
    reduces = sorted((r for r in rows if r.get("op") == "all_reduce"), key=lambda r: r["bytes"])
    if not reduces:
        raise UsageError(f"{source} has no all_reduce results; make it with `scaletrain comm --ops all_reduce --json`")
    n = reduces[0]["world_size"]
    small = reduces[0]
    alpha = small["seconds"] / (2 * (n - 1))
    factor = 2 * (n - 1) / n
    points = []
    for row in reduces[1:] or reduces:
        extra = row["seconds"] - small["seconds"]
        seconds = extra if row is not small and extra > 0 else row["seconds"]
        points.append((row["bytes"], row["bytes"] * factor / seconds))
    link = Link(alpha_s=alpha, busbw=points[-1][1], nproc=n, source=source, points=tuple(points))
    return replace(link, gather_ratio=_ring_ratio(rows, "all_gather", link),
                   scatter_ratio=_ring_ratio(rows, "reduce_scatter", link))


def _ring_ratio(rows: list[dict], op: str, link: Link) -> float:
    """The median over `op`'s measured sizes of its time over a ring's with `link`'s latency
    and bandwidth (1 where the op was not measured)."""
    ratios = []
    for row in rows:
        if row.get("op") == op and row["seconds"] > 0:
            ring = ring_all_gather_seconds(row["bytes"], link.nproc, link.busbw_for(row["bytes"]), link.alpha_s)
            if ring > 0:
                ratios.append(row["seconds"] / ring)
    return statistics.median(ratios) if ratios else 1.0


def load_comm_json(path: Path) -> Link:
    try:
        doc = json.loads(Path(path).read_text())
        rows = doc["results"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--comm {path}: not a `scaletrain comm --json` result ({exc}); "
                         "make one with `scaletrain comm --ops all_reduce --json > comm.json`") from None
    return link_from_rows(rows, f"{path}")


def measure_link(sizes: list[int], nproc: int, backend: Optional[str], device: Optional[str],
                 hosts=None) -> Link:
    """The all_reduce on `nproc` processes of this machine (for when no probe job has several
    processes), or on one process per host of `hosts` (measure.jobs.Hosts: the network between
    them): a 4 KB message for the latency, then each of `sizes`; FSDP's all_gather and
    reduce_scatter at the same sizes."""
    from ..measure.jobs import run_job

    with tempfile.TemporaryDirectory(prefix="scaletrain-probe-") as tmp:
        out = Path(tmp) / "comm.json"
        argv = ["comm", "--ops", ",".join(("all_reduce", *FSDP_OPS)),
                "--sizes", ",".join(str(s) for s in sorted({4096, *sizes})),
                "--iters", "20", "--quiet", "--out", str(out)]
        if backend:
            argv += ["--backend", backend]
        if device:
            argv += ["--device", device]
        code = run_job(argv, nproc, hosts)
        where = f"{nproc} processes" + (f", one on each of {hosts.names}" if hosts else "")
        if code != 0 or not out.exists():
            raise measurement_failed(f"the all_reduce probe on {where}", code, hosts)
        rows = json.loads(out.read_text())["results"]
    return link_from_rows(rows, f"all_reduce probe, {where}")
