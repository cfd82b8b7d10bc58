"""How many CPU cores this process may use: its affinity, capped by the cgroup CPU quota.

A container (a Kubernetes pod, a Docker container with --cpus) usually sees every core of
the machine in `os.cpu_count()` and in its affinity, while its cgroup lets it run for only
`quota / period` cores' worth of time. Threads sized to the machine then fight over a
fraction of it. So the quota counts too, at every level of the cgroup hierarchy (a parent's
limit binds its children), in cgroup v2 (`cpu.max`) and v1 (`cpu.cfs_quota_us` /
`cpu.cfs_period_us`). No torch here: the launcher and `scaletrain env` read it cheaply.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional


def affinity_cores() -> int:
    """Cores the scheduler may run this process on (taskset, cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set]]:
    """(mount point, root inside the hierarchy, filesystem type, super options) per cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and tail and tail[0] in ("cgroup", "cgroup2"):
            options = set(tail[2].split(",")) if len(tail) > 2 else set()
            found.append((fields[4], fields[3], tail[0], options))
    return found


def _levels(mount: str, root: str, path: str) -> list[Path]:
    """This cgroup's folder and every ancestor up to the mount point."""
    relative = path[len(root):] if root != "/" and path.startswith(root) else path
    folder = Path(mount) / relative.lstrip("/")
    levels = [folder]
    while folder != Path(mount) and folder.parent != folder:
        folder = folder.parent
        levels.append(folder)
    return levels


def _v2_limit(folder: Path) -> Optional[float]:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _v1_limit(folder: Path) -> Optional[float]:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def cgroup_cpu_limit(proc: Path = Path("/proc/self")) -> Optional[float]:
    """The tightest CPU quota (in cores, may be fractional) over this process's cgroups, or
    None when there is none (or no cgroup file system to read)."""
    try:
        memberships = (proc / "cgroup").read_text().splitlines()
        mounts = _mounts((proc / "mountinfo").read_text())
    except OSError:
        return None
    limits = []
    for line in memberships:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        v2 = hierarchy == "0" and controllers == ""
        for mount, root, fstype, options in mounts:
            if v2 and fstype == "cgroup2":
                limits += [v for v in map(_v2_limit, _levels(mount, root, path)) if v is not None]
            elif not v2 and fstype == "cgroup" and "cpu" in controllers.split(",") and "cpu" in options:
                limits += [v for v in map(_v1_limit, _levels(mount, root, path)) if v is not None]
    return min(limits) if limits else None


def cpu_cores() -> int:
    """Cores this process may use: its affinity, capped by the cgroup quota rounded up
    (a quota of 1.5 cores still lets two threads make progress), at least 1."""
    cores = affinity_cores()
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> Optional[int]:
    """Memory the machine can give new allocations without swapping (MemAvailable), or
    None where unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
