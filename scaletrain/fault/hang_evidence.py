"""What a rank leaves behind when a run hangs: its Python stacks (every thread) and its last
collectives.

The collectives come from torch's flight recorder, where the process group has one: NCCL's,
and Gloo's since torch 2.x (recorded when `TORCH_FR_BUFFER_SIZE` is set before the group is
made; `scaletrain.init` sets it to FLIGHT_RECORDER_ENTRIES unless it is set already). Each
entry is one collective: its sequence number in its process group, its name, its tensors'
sizes and types, and whether it has finished. Where there is no flight recorder, scaletrain's
own record stands in: the last operations the library itself marked (`run.watch`: train
steps, all-reduces of metrics, barriers, checkpoints), with their sequence numbers and the
bytes they carried. Both are kept in every dump.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
import traceback
from typing import Optional

#: Collectives torch's flight recorder keeps per process (set where the user has not).
FLIGHT_RECORDER_ENTRIES = 400
#: How many of the last entries a rank publishes with its heartbeat (read when it goes silent).
PUBLISHED_ENTRIES = 24
OWN_ENTRIES = 64


def enable_flight_recorder(environ=os.environ) -> None:
    """Before the process group is made: torch records its collectives."""
    if not environ.get("TORCH_FR_BUFFER_SIZE") and not environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE"):
        environ["TORCH_FR_BUFFER_SIZE"] = str(FLIGHT_RECORDER_ENTRIES)


class OpLog:
    """scaletrain's own record of the operations it marked, newest last."""

    def __init__(self, size: int = OWN_ENTRIES) -> None:
        self.entries: collections.deque = collections.deque(maxlen=size)
        self.seq = 0

    def begin(self, name: str, nbytes: Optional[int] = None) -> dict:
        self.seq += 1
        entry = {"seq": self.seq, "name": name, "bytes": nbytes, "started": time.time(), "done": False}
        self.entries.append(entry)
        return entry

    @staticmethod
    def end(entry: dict) -> None:
        entry["done"] = True

    def tail(self, n: int = OWN_ENTRIES) -> list[dict]:
        return [dict(e) for e in list(self.entries)[-n:]]


def stacks() -> str:
    """Every thread's Python stack, the training thread first, as a traceback reads."""
    frames = sys._current_frames()
    try:
        names = {t.ident: t.name for t in threading.enumerate()}
        main = threading.main_thread().ident
        out = []
        for ident in sorted(frames, key=lambda i: (i != main, names.get(i, ""))):
            out.append(f"Thread {names.get(ident, '?')} ({ident}){' — the training thread' if ident == main else ''}:")
            out.extend(line.rstrip("\n") for line in traceback.format_stack(frames[ident]))
            out.append("")
        return "\n".join(out)
    finally:
        # The dict holds this function's own frame, which holds the dict: a cycle that would
        # keep every thread's frames, and the tensors in their locals (a step's activations),
        # alive until the garbage collector next ran. Published every few seconds during
        # training, it raised a run's memory peak by whatever the training thread held then.
        del frames


def main_stack_summary(limit: int = 6) -> list[str]:
    """The training thread's innermost frames, as 'file:line in function'."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return []
    summary = traceback.extract_stack(frame)[-limit:]
    return [f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in summary]


def flight_recorder(last: Optional[int] = None) -> Optional[list[dict]]:
    """torch's record of this process's collectives (oldest first, the last `last`), each as
    {seq, group, name, sizes, dtypes, done}; None where torch keeps none."""
    try:
        import torch._C._distributed_c10d as c10d
    except ImportError:
        return None
    dump = getattr(c10d, "_dump_fr_trace_json", None) or getattr(c10d, "_dump_nccl_trace_json", None)
    if dump is None:
        return None
    try:
        entries = json.loads(dump()).get("entries") or []
    except Exception:  # noqa: BLE001 - no recorder enabled, or one that cannot dump now
        return None
    if not entries:
        return None
    if last is not None:
        entries = entries[-last:]
    return [_entry(e) for e in entries]


def _entry(e: dict) -> dict:
    group = e.get("process_group") or ["?", "?"]
    done = bool(e.get("retired")) or e.get("state") == "completed"
    return {"seq": e.get("collective_seq_id"), "p2p_seq": e.get("p2p_seq_id") if e.get("is_p2p") else None,
            "group": f"{group[1]} (id {group[0]})" if len(group) > 1 else str(group[0]),
            "name": str(e.get("profiling_name", "?")).split(":", 1)[-1],
            "backend": str(e.get("profiling_name", "?")).split(":", 1)[0],
            "sizes": e.get("input_sizes"), "dtypes": e.get("input_dtypes"), "done": done,
            "state": e.get("state"), "created_ns": e.get("time_created_ns")}


def record(rank: int, ops: OpLog, op: Optional[str], step: int, last: Optional[int] = None) -> dict:
    """This rank's evidence: what it is doing, its stacks, its last collectives."""
    return {"rank": rank, "pid": os.getpid(), "time": time.time(), "op": op, "step": step,
            "stacks": stacks(), "where": main_stack_summary(), "flight_recorder": flight_recorder(last),
            "scaletrain_ops": ops.tail(last or OWN_ENTRIES)}


def write(folder, evidence: dict, source: str) -> None:
    """rank-N-stacks.txt and rank-N-collectives.json in `folder`. `source`: how the evidence
    was had ("written by the rank itself", or read from its last heartbeat)."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rank = evidence["rank"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(evidence["time"]))
    header = f"# rank {rank} (pid {evidence['pid']}), {source}, at {when}\n\n"
    (folder / f"rank-{rank}-stacks.txt").write_text(header + evidence["stacks"])
    facts = {k: v for k, v in evidence.items() if k != "stacks"}
    (folder / f"rank-{rank}-collectives.json").write_text(json.dumps({**facts, "source": source}, indent=1))
