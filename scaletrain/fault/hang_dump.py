"""When the watchdog finds a hang, every rank leaves its evidence in the run's folder.

Through the job's store (the one the heartbeats use):
- every rank publishes its evidence (hang_evidence.py: stacks, the tail of its collectives) with
  its heartbeat whenever it has been in a new operation for a moment, so a rank that then
  freezes (stopped, its machine gone) has left what it was doing;
- the rank whose watchdog finds the hang writes its own evidence, claims the dump (the first
  to claim it leads it), asks every other rank to write theirs (each one's heartbeat thread
  looks for the request at every beat), waits a few beats for them, writes the published
  evidence of those that did not answer, and then reads the folder (hang_report.py) for
  the job's one line.

Every store call runs with a deadline: a store whose host is stopped never answers.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from . import hang_evidence, hang_report

STORE_DEADLINE_S = 4.0


def bounded(call: Callable[[], Any], seconds: float = STORE_DEADLINE_S) -> Any:
    """call() in a throwaway thread; None when it fails or does not return in time."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except Exception:  # noqa: BLE001 - an unreachable store reads as no answer
            pass
    thread = threading.Thread(target=run, name="scaletrain-dump-store", daemon=True)
    thread.start()
    thread.join(seconds)
    return box.get("value")


class HangEvidence:
    """One rank's part in a hang's dump, into `folder`."""

    def __init__(self, rank: int, world_size: int, prefix: str, folder: Path, ops: hang_evidence.OpLog,
                 refresh_s: float = 5.0):
        self.rank, self.world_size, self.prefix, self.folder, self.ops = rank, world_size, prefix, Path(folder), ops
        self.refresh_s = refresh_s  # published again at least this often, whatever the rank is doing
        self._published_since: Optional[float] = None
        self._published_at = -float("inf")
        self._dumped = False

    def _key(self, *parts) -> str:
        return self.prefix + "/".join(str(p) for p in parts)

    # -- the heartbeat thread's side ----------------------------------------------------
    def publish(self, store, op: Optional[str], since: float, step: int) -> None:
        """Publishes this rank's evidence once per operation that has lasted a moment (its
        collective issued), so that it shows where the rank is if it freezes there; and every
        `refresh_s` whatever it is doing (steps too short for a beat to fall inside one)."""
        now = time.monotonic()
        in_new_op = op is not None and since != self._published_since and now - since >= 0.1
        if not in_new_op and now - self._published_at < self.refresh_s:
            return
        record = hang_evidence.record(self.rank, self.ops, op, step, last=hang_evidence.PUBLISHED_ENTRIES)
        store.set(self._key("evidence", self.rank), json.dumps(record))
        self._published_since, self._published_at = (since if op is not None else None), now

    def answer_request(self, store, op: Optional[str], step: int) -> None:
        """Writes this rank's evidence when another rank has asked for it (once)."""
        if self._dumped or not store.check([self._key("dump", "request")]):
            return
        self.write_own(op, step, "written by the rank itself when asked")
        store.set(self._key("dump", "written", self.rank), "1")

    # -- the rank that found the hang ---------------------------------------------------
    def write_own(self, op: Optional[str], step: int, source: str) -> None:
        if not self._dumped:
            self._dumped = True
            hang_evidence.write(self.folder, hang_evidence.record(self.rank, self.ops, op, step), source)

    def collect(self, store, verdict: dict, op: Optional[str], step: int, wait_s: float) -> str:
        """Writes the dump and returns the clause the one error line ends with."""
        self.write_own(op, step, "written by the rank itself, which found the hang")
        if store is None:
            return f"this rank's stacks and collectives in {self.folder} (the store is gone: no others')"
        bounded(lambda: store.set(self._key("dump", "written", self.rank), "1"))  # the leader need not wait for it
        leader = bounded(lambda: store.add(self._key("dump", "claim"), 1)) == 1
        if not leader:
            return f"stacks and collectives in {self.folder}"
        bounded(lambda: store.set(self._key("dump", "request"), str(self.folder)))
        quiet = {int(r) for r in verdict.get("silent", {})} | set(verdict.get("never_reported", []))
        waiting = {r for r in range(self.world_size) if r != self.rank and r not in quiet}
        deadline = time.monotonic() + wait_s
        while waiting and time.monotonic() < deadline:
            waiting -= {r for r in waiting if bounded(lambda r=r: store.check([self._key("dump", "written", r)]))}
            time.sleep(0.1)
        for rank in range(self.world_size):
            if rank != self.rank and not (self.folder / f"rank-{rank}-collectives.json").exists():
                self._write_published(store, rank, verdict)
        hang_report_verdict = {**verdict, "detected_by": self.rank, "world_size": self.world_size,
                               "when": time.strftime("%Y-%m-%d %H:%M:%S")}
        (self.folder / hang_report.VERDICT_FILE).write_text(json.dumps(hang_report_verdict, indent=1))
        found = hang_report.analyse(*hang_report.load(self.folder))
        hang_report.write_text(self.folder)
        return hang_report.line(hang_report_verdict, found, self.folder)

    def _write_published(self, store, rank: int, verdict: dict) -> None:
        raw = bounded(lambda: store.get(self._key("evidence", rank))
                      if store.check([self._key("evidence", rank)]) else None)
        if raw is None:
            return
        record = json.loads(raw)
        age = time.time() - record["time"]
        hang_evidence.write(self.folder, record, f"read from its last heartbeat, published {age:.0f} s before the dump "
                                            "(the rank did not answer)")
