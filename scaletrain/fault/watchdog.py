"""Hang detection: a rank that stops responding is named, and every other rank exits.

Without this, a rank that is stopped, deadlocked or cut off leaves its peers blocked in a
collective until the backend's timeout (Gloo: 30 minutes) and then fails with a message
that names no one. Here each rank:

- marks the operation it is in (`with watchdog.op("all-reduce")`): two attribute writes,
  no communication, so it costs nothing per step;
- publishes a heartbeat every few seconds from a background thread into the job's c10d
  TCPStore (the rendezvous store every rank already reaches): its step, its current
  operation and a sequence number;
- watches its own operations from a second thread: one that has lasted `timeout` makes it
  read every rank's heartbeat twice, seconds apart. A rank whose sequence number did not
  move is not responding (a stopped or frozen process); one that moves but is elsewhere
  is alive but behind (e.g. deadlocked in other code); a store that does not answer means
  the rank hosting it (rank 0 under spawn) or the network to it is gone.
  It prints ONE line naming them and what they were doing, and leaves with os._exit: a
  thread cannot unblock a collective, and the launcher then stops whatever is left.
  When every rank is alive and in the same operation, that is a long operation (a large
  checkpoint, a slow step), not a hang: it looks again one timeout later, and a collective
  that really stalls is ended by the backend's own timeout, set a little beyond.

Comparing sequence numbers instead of timestamps keeps the verdict right when the
machines' clocks disagree.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Optional

from ..process.lineage import Lineage
from .hang_dump import HangEvidence
from .hang_evidence import OpLog

#: Exit status of a rank that gave up waiting for its peers.
EXIT_PEER_LOST = 3
STORE_TIMEOUT_S = 4.0  # a store that does not answer this fast is considered gone
#: A heartbeat follows the rank's operations (a new one, the next step) at most this often: a
#: rank that stops between two beats of the interval is then seen where it stopped (20 steps
#: of 50 ms fit between two beats at --timeout 20s), for a store call every quarter second.
FOLLOW_S = 0.25

_COMM_WORDS = ("gloo", "nccl", "connection", "timed out", "timeout", "socket", "peer", "closed", "broken pipe")


def heartbeat_interval(timeout_s: float) -> float:
    return min(5.0, max(0.5, timeout_s / 10))


def looks_like_communication_failure(exc: BaseException) -> bool:
    import torch.distributed as dist

    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in _COMM_WORDS)


class Watchdog:
    def __init__(self, rank: int, world_size: int, timeout_s: float, host: str, port: int, attempt: str = "0",
                 timeout_label: Optional[str] = None, dump_dir: Optional[Path] = None):
        self.rank, self.world_size, self.timeout_s = rank, world_size, float(timeout_s)
        self.host, self.port = host, port
        self.prefix = f"scaletrain/heartbeat/{attempt}/"
        self.timeout_label = timeout_label or f"{timeout_s:g}s"
        self.interval = heartbeat_interval(self.timeout_s)
        self.step = 0
        self._op: Optional[str] = None
        self._since = 0.0
        self._seq = 0
        self._entered = 0  # watched operations entered: none yet means still starting up
        self._stop = threading.Event()
        # Set by the first watched operation: the heartbeat then says at once that the rank is
        # past start-up, not up to an interval later (a rank stopped in between would otherwise
        # be reported as last seen in start-up, with its first steps done).
        self._started = threading.Event()
        self._moved = threading.Event()  # set when an operation begins: the heartbeat follows it
        self._verdict_lock = threading.Lock()
        self._snapshot: Optional[tuple[float, dict]] = None
        # The store lives in the launcher (spawn's command, torchrun's agent) or in rank 0: once
        # the launcher is gone every rank is being stopped, and a store call would only make
        # torch print a C++ stack trace of the closed connection before the rank's one line.
        self._lineage = Lineage()
        self.verdict: Optional[dict] = None  # what diagnose found, for the hang's dump
        self.ops = OpLog()  # scaletrain's own record of the operations it marked
        # When a hang is found, every rank's stacks and collectives go to DUMP_DIR/hang-<attempt>.
        self.evidence = (HangEvidence(rank, world_size, self.prefix, Path(dump_dir) / f"hang-{attempt}", self.ops,
                                      refresh_s=self.interval) if dump_dir is not None else None)
        self._beat_store = self._connect()
        self._read_store = self._connect()
        self._beat()  # present from the start: "never reported" then means really never

    def _connect(self):
        import torch.distributed as dist

        # Connecting may take long on a crowded host (64 processes on 2 cores): that is
        # start-up, bounded by the run's timeout. Once connected, a store that does not
        # answer within STORE_TIMEOUT_S is gone.
        store = dist.TCPStore(self.host, self.port, is_master=False, wait_for_workers=False,
                              timeout=timedelta(seconds=max(self.timeout_s, STORE_TIMEOUT_S)))
        store.set_timeout(timedelta(seconds=STORE_TIMEOUT_S))
        return store

    # -- the training thread's side ---------------------------------------------------
    @contextlib.contextmanager
    def op(self, name: str, nbytes: Optional[int] = None):
        """Marks a blocking operation; a communication failure inside it is diagnosed.
        `nbytes`: what it carries, for the record of the last operations."""
        outer = self._op
        if outer is None:
            self._op, self._since = name, time.monotonic()
            self._entered += 1
            if self._entered == 1:
                self._started.set()
            self._moved.set()
        entry = self.ops.begin(name, nbytes)
        try:
            yield
        except Exception as exc:
            if looks_like_communication_failure(exc):
                self.give_up(name, time.monotonic() - self._since, cause=exc)
            raise
        finally:
            OpLog.end(entry)
            if outer is None:
                self._op = None

    # -- threads ----------------------------------------------------------------------
    def start(self) -> "Watchdog":
        self._threads = [threading.Thread(target=target, name=f"scaletrain-{name}", daemon=True)
                         for target, name in ((self._beat_loop, "heartbeat"), (self._watch_loop, "watchdog"))]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Ends both threads before the process group goes: a thread still inside a store
        call while the interpreter tears torch down can hang the exit. The heartbeat waits on
        `_started` until the first operation: woken too, it sees the stop at once."""
        self._stop.set()
        self._started.set()
        self._moved.set()
        for thread in getattr(self, "_threads", []):
            thread.join(timeout=STORE_TIMEOUT_S)
        self._beat_store = self._read_store = None

    def _beat(self) -> None:
        self._seq += 1
        record = {"seq": self._seq, "step": self.step, "op": self._op, "t": time.time(), "pid": os.getpid(),
                  "ops": self._entered}
        self._beat_store.set(self.prefix + str(self.rank), json.dumps(record))

    def _beat_loop(self) -> None:
        starting = True
        while True:
            if starting:  # a beat every interval, and one at once when the first operation begins
                starting = not self._started.wait(self.interval)
            else:  # a beat every interval, and one when an operation begins, FOLLOW_S apart at most
                self._moved.wait(self.interval)
                if self._stop.wait(FOLLOW_S):
                    return
            self._moved.clear()
            if self._stop.is_set():
                return
            if self._lineage.gone():  # the rank is being stopped; its launcher says so
                return
            try:
                self._beat()
                if self.evidence is not None:
                    self.evidence.publish(self._beat_store, self._op, self._since, self.step)
                    self.evidence.answer_request(self._beat_store, self._op, self.step)
            except Exception:  # the store is unreachable: the watch loop will find out
                pass

    def _watch_loop(self) -> None:
        tick = min(1.0, self.interval / 2)
        watched, check_at = None, self.timeout_s
        while not self._stop.wait(tick):
            op, since = self._op, self._since
            if op is None:
                self._snapshot = None
                continue
            if since != watched:  # a new operation
                watched, check_at, self._snapshot = since, self.timeout_s, None
            waited = time.monotonic() - since
            if self._snapshot is None and waited >= check_at - 2.5 * self.interval:
                self._snapshot = (time.monotonic(), self._read_all())
            if waited >= check_at and not self._lineage.gone():
                with self._verdict_lock:
                    message, culprits = self.diagnose(op, waited)
                    if culprits:
                        self._exit(self._with_dump(message, op))
                # Every rank is alive and in this same operation: a long one (a large
                # checkpoint, a slow step), not a hang. Look again one timeout later; a
                # collective that really stalls is ended by the backend's own timeout.
                check_at, self._snapshot = waited + self.timeout_s, None

    # -- the verdict ------------------------------------------------------------------
    def _read_all(self) -> Optional[dict]:
        """{rank: heartbeat or None}; None when the store does not answer within
        STORE_TIMEOUT_S. The read runs in a throwaway thread because a store whose host is
        stopped or cut off keeps the TCP connection open and a read on it never returns
        (the client's own timeout does not cover that)."""
        box: dict = {}
        done = threading.Event()

        def read():
            try:
                found = {}
                for r in range(self.world_size):
                    key = self.prefix + str(r)
                    found[r] = json.loads(self._read_store.get(key)) if self._read_store.check([key]) else None
                box["found"] = found
            except Exception:
                pass
            done.set()

        threading.Thread(target=read, name="scaletrain-store-read", daemon=True).start()
        return box.get("found") if done.wait(STORE_TIMEOUT_S) else None

    def diagnose(self, op: str, waited: float) -> tuple[str, bool]:
        """(one line, whether some rank is missing or behind)."""
        first = self._snapshot
        if first is None:  # failed before the watch loop looked: take the first look now
            first = (time.monotonic(), self._read_all())
            time.sleep(2.5 * self.interval)
        second = self._read_all() if first[1] is not None else None
        gap = time.monotonic() - first[0]
        me = f"rank {self.rank} waited {waited:.0f} s in {_where(op, self.step)}"
        self.verdict = {"where": _where(op, self.step), "op": op, "waited_s": waited, "timeout": self.timeout_label,
                        "store_gone": first[1] is None or second is None}
        if first[1] is None or second is None:
            return (f"{me}: the rendezvous store at {self.host}:{self.port} (hosted by rank 0 or the launcher) does not "
                    f"answer, so rank 0 stopped responding or the network to it is cut; giving up (--timeout "
                    f"{self.timeout_label})"), True
        silent, behind, never = {}, {}, []
        for r in range(self.world_size):
            if r == self.rank:
                continue
            a, b = first[1].get(r), second.get(r)
            if b is None:
                never.append(r)
            elif a is not None and a["seq"] == b["seq"]:
                age = max(gap, time.time() - b["t"])
                silent[r] = (f"pid {b['pid']}, silent for {age:.0f} s, last seen in "
                             f"{_where(b['op'], b['step'], b.get('ops'))}")
            elif b["step"] != self.step or b["op"] != op:
                behind[r] = f"alive but in {_where(b['op'], b['step'], b.get('ops'))}"
        self.verdict.update(silent=silent, behind=behind, never_reported=never)
        parts = []
        culprits = bool(silent or never or behind)
        if silent:
            parts.append(_named(silent, "stopped responding"))
        if never:
            parts.append(f"{_ranks(never)} never reported")
        if behind:
            parts.append(_named(behind, "did not arrive"))
        if not parts:
            parts.append(f"every rank is alive and in {_where(op, self.step)}: the collective itself stalled "
                         "(network or backend)")
        return f"{me}; " + "; ".join(parts) + f"; giving up (--timeout {self.timeout_label})", culprits

    def give_up(self, op: str, waited: float, cause: Optional[BaseException] = None) -> None:
        """After a communication failure: prints the verdict and ends this process."""
        gone = self._lineage.gone()
        if gone:  # a peer failed because the launcher went: that is the news, not the peer
            self._stop.set()
            print(f"scaletrain: rank {self.rank}: {gone} is gone; stopping this rank", file=sys.stderr, flush=True)
            os._exit(128 + signal.SIGTERM)
        with self._verdict_lock:
            try:
                message, _ = self.diagnose(op, waited)
            except Exception as exc:  # never let the diagnosis itself hide the exit
                message = f"rank {self.rank} waited {waited:.0f} s in {op}; peers could not be diagnosed ({exc})"
            self._exit(self._with_dump(message, op))

    def _with_dump(self, message: str, op: str) -> str:
        """Writes the hang's evidence (this rank's, and as the first to find it every rank's)
        and puts what it shows into the line, before 'giving up'."""
        if self.evidence is None or self.verdict is None:
            return message
        try:
            store = None if self.verdict.get("store_gone") else self._read_store
            clause = self.evidence.collect(store, self.verdict, op, self.step, wait_s=2 * self.interval + 2)
        except Exception as exc:  # noqa: BLE001 - the dump must never keep the process from leaving
            clause = f"the dump into {self.evidence.folder} failed ({type(exc).__name__}: {exc})"
        head, sep, tail = message.rpartition("; giving up")
        return f"{head}; {clause}{sep}{tail}" if sep else f"{message}; {clause}"

    def _exit(self, message: str) -> None:
        """Ends this process at once: another thread may be stuck in a collective that
        nothing can interrupt, and the launcher then stops whatever is left."""
        self._stop.set()
        print(f"scaletrain: error: {message}", file=sys.stderr, flush=True)
        os._exit(EXIT_PEER_LOST)


def _where(op: Optional[str], step: int, ops: Optional[int] = None) -> str:
    """'train step 6' (the step under way), 'evaluate after step 5', 'no operation after step
    5', 'start-up, before its first collective' (`ops`: watched operations it has entered)."""
    if op == "train step":
        return f"train step {step + 1}"
    if op is None and ops == 0:
        return "start-up, before its first collective"
    return f"{op or 'no collective'} after step {step}"


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _named(found: dict, what: str) -> str:
    """'rank 1 stopped responding (details)' or 'ranks 1, 3 stopped responding (rank 1: …; rank 3: …)'."""
    if len(found) == 1:
        (rank, details), = found.items()
        return f"rank {rank} {what} ({details})"
    return f"{_ranks(found)} {what} (" + "; ".join(f"rank {r}: {d}" for r, d in sorted(found.items())) + ")"
