"""Slurm's compressed lists, expanded: the tasks per node (`2(x3),1`) and the host list
(`node[01-03,07],gpu-a`) of a job, as SLURM_TASKS_PER_NODE and SLURM_JOB_NODELIST give them."""

from __future__ import annotations

import re

from ..foundation.errors import DetectionError


_TASKS_RE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def parse_tasks_per_node(value: str) -> list[int]:
    """Slurm's compressed counts: '2(x3),1' -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in value.split(","):
        m = _TASKS_RE.match(part.strip())
        if not m:
            raise DetectionError(f"cannot read Slurm's tasks-per-node value {value!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def expand_hostlist(value: str) -> list[str]:
    """Slurm's compressed host list: 'gpu[01-03,07],login1' -> ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']."""
    hosts: list[str] = []
    for item in _split_top_level(value):
        m = re.match(r"^(.*?)\[([^\]]+)\](.*)$", item)
        if not m:
            hosts.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            lo, _, hi = rng.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.extend(expand_hostlist(f"{prefix}{i:0{width}d}{suffix}"))
    return hosts


def _split_top_level(value: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in value:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]
