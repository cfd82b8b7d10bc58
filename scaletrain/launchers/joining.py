"""Start-up, bounded and named: a rank that waits in `init_process_group` longer than the
start-up timeout finds out which ranks never joined, says so in one line ("rank 1 did not
join within 2m") and ends, instead of waiting torch's 30 minutes without a word.

It runs in the rank runner, so plain torch.distributed scripts get it too, under every
launcher. A background thread looks every second: once torch.distributed is initialised
it stops; after the deadline, if the main thread is inside `init_process_group` (its
Python frames say so; the C++ wait releases the GIL), it reads the rendezvous store: each
rank publishes its address there under `default_pg/.../<rank>` as it joins, so the ranks
without a key are the ones that never arrived. A program that never joins a group at all
is left alone: only a rank that is waiting for its peers gives up.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from datetime import timedelta
from typing import Callable, Optional

from ..foundation.durations import format_duration
from ..process.environment import DistEnv

# `default_pg/0//cpu//0/<rank>`, under a prefix when the store is torchrun's agent's
# (`/worker/attempt_<n>/`) or scaletrain's (`scaletrain/restart-<n>/`).
_ADDRESS_KEY = re.compile(r"^(.*?)default_pg/.*/(\d+)$")
_INIT_FRAMES = {"init_process_group", "_new_process_group_helper", "_env_rendezvous_handler",
                "_tcp_rendezvous_handler", "_create_c10d_store"}
STORE_ANSWER_S = 5.0


def _distributed():
    return sys.modules.get("torch.distributed")  # imported by the program, never by us


def joined() -> bool:
    dist = _distributed()
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except AttributeError:  # the program's thread is still importing torch.distributed
        return False


def waiting_to_join() -> bool:
    """Whether the main thread is inside torch.distributed's start-up."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        code = frame.f_code
        if code.co_name in _INIT_FRAMES and "torch" in code.co_filename:
            return True
        frame = frame.f_back
    return False


def ranks_present(env: DistEnv) -> Optional[set[int]]:
    """The ranks that published their address in the rendezvous store; None when the store
    does not answer (its host, rank 0 or the launcher, is not there)."""
    dist = _distributed()
    try:  # (AttributeError: torch.distributed still being imported by the program's thread)
        store = dist.TCPStore(env.master_addr, env.master_port, is_master=False, wait_for_workers=False,
                              timeout=timedelta(seconds=STORE_ANSWER_S))
        keys = store.list_keys()
    except Exception:  # noqa: BLE001 - any failure to read the store means: no answer
        return None
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    found = {int(m.group(2)) for m in map(_ADDRESS_KEY.match, keys)
             if m and (not m.group(1) or m.group(1).rstrip("/").endswith((f"_{attempt}", f"-{attempt}")))}
    return {r for r in found if r < env.world_size}


def verdict(env: DistEnv, present: Optional[set[int]], timeout_s: float) -> str:
    label = format_duration(timeout_s)
    if present is None:
        return (f"the rendezvous store at {env.master_addr}:{env.master_port} did not answer within {label}: "
                f"rank 0 (or the launcher hosting the store) did not start it; rank {env.rank} gave up waiting "
                f"(--timeout {label})")
    missing = sorted(set(range(env.world_size)) - present - {env.rank})
    if not missing:
        return (f"every rank published its address but the connections did not complete within {label}: a rank "
                f"stopped, or the network between the hosts drops traffic (--timeout {label})")
    who = f"rank {missing[0]}" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing))
    return f"{who} did not join within {label} (rank {env.rank} waited in init_process_group; --timeout {label})"


class JoinWatch:
    """The background thread; `give_up(message)` is called once, from the thread, and is
    expected to end the process."""

    def __init__(self, env: DistEnv, timeout_s: float, give_up: Callable[[str], None]):
        self.env, self.timeout_s, self.give_up = env, timeout_s, give_up
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="scaletrain-join-watch", daemon=True)

    def start(self) -> "JoinWatch":
        if self.env.world_size > 1 and self.timeout_s > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            if joined():
                return
            if time.monotonic() - self._started < self.timeout_s or not waiting_to_join():
                continue
            if joined():  # it completed while we looked
                return
            self.give_up(verdict(self.env, ranks_present(self.env), self.timeout_s))
            return


def exit_after(message: str, status: int, record: Callable[[str], None]) -> None:
    """Record the failure, say it in one line, and leave: a thread cannot unblock the
    main thread's wait, and the launcher stops the others."""
    record(message)
    print(f"scaletrain: error: {message}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(status)
