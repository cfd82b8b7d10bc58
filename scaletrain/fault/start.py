"""Starting hang detection for a run (see watchdog.py for how it works)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Optional

from ..foundation.durations import format_duration
from ..process.environment import DistEnv
from .watchdog import STORE_TIMEOUT_S, Watchdog, heartbeat_interval


def backstop_timeout(timeout: timedelta) -> timedelta:
    """The backend's own timeout, a little beyond the watchdog's: the watchdog should speak
    first (it names the culprit); the backend's error is the fallback if it cannot."""
    seconds = timeout.total_seconds()
    return timedelta(seconds=seconds + 2.5 * heartbeat_interval(seconds) + 2 * STORE_TIMEOUT_S + 2)


def start_watchdog(env: DistEnv, timeout: timedelta, dump_dir=None) -> Optional[Watchdog]:
    """A started Watchdog when this process has peers, else None. `dump_dir`: where a hang's
    evidence goes (its hang-<attempt> folder)."""
    import torch.distributed as dist

    if env.world_size < 2 or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # torchrun keeps its store across restarts
    return Watchdog(env.rank, env.world_size, timeout.total_seconds(), env.master_addr, env.master_port,
                    attempt=attempt, timeout_label=format_duration(timeout.total_seconds()),
                    dump_dir=dump_dir).start()
