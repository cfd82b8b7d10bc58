"""Failure records: each failing rank writes one small JSON file (rank, host, time,
traceback) into the folder the launcher gave it ($SCALETRAIN_ERROR_DIR); the launcher reads
them after the job and shows the FIRST failure first. When one rank dies, its peers fail a
moment later with "connection closed" errors; those are consequences, not the cause, so the
first record to be written is the root cause (a marker file created with O_EXCL decides)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Optional, TextIO

FIRST_MARKER = "first"


def _claim_first(error_dir: Path) -> bool:
    try:
        os.close(os.open(error_dir / FIRST_MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def user_traceback(exc: BaseException, skip_files: tuple = ()) -> str:
    """The traceback without the frames of the machinery that ran the user's code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.endswith((*skip_files, "<frozen runpy>")):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def write_record(error_dir: Optional[str], rank: int, summary: str, text: str) -> Optional[dict]:
    """Writes this rank's record; returns it, or None when there is no folder to write to
    (no launcher waiting for it, or a host that does not share the launcher's /tmp)."""
    if not error_dir or not Path(error_dir).is_dir():
        return None
    folder = Path(error_dir)
    record = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(), "time": time.time(),
              "summary": summary, "traceback": text, "first": _claim_first(folder)}
    # Host and pid in the name: ranks on different hosts may share a folder (and a rank number
    # never repeats within a job, but a restarted rank's pid differs).
    path = folder / f"rank-{rank}-{record['host']}-{record['pid']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
    return record


def read_records(error_dir: str) -> list[dict]:
    records = []
    for path in Path(error_dir).glob("rank-*.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    # The claimed first failure leads; the rest in the order they happened.
    return sorted(records, key=lambda r: (not r.get("first"), r.get("time", 0)))


def report(records: list[dict], exit_status: int, stream: TextIO = sys.stderr) -> None:
    """The first failing rank's traceback first, with its host; then one line per later failure."""
    if not records:
        if exit_status:
            print(f"scaletrain: the job failed (exit status {exit_status}) and no rank left a traceback; "
                  "see the launcher's output above (a rank killed by a signal or out of memory?)", file=stream)
        return
    first, *others = records
    print(f"scaletrain: rank {first['rank']} on host {first['host']} failed first: {first['summary']}", file=stream)
    print(first["traceback"].rstrip(), file=stream)
    for r in others:
        print(f"scaletrain: then rank {r['rank']} on host {r['host']} failed: {r['summary']}", file=stream)
    print(f"scaletrain: the other processes were stopped; exit status {exit_status or 1}", file=stream, flush=True)
