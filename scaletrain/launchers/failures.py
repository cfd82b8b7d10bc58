"""Failure records: each failing rank writes one small JSON file (rank, host, time,
traceback) into the folder the launcher gave it ($SCALETRAIN_ERROR_DIR); the launcher reads
them after the job and shows the FIRST failure first. When one rank dies, its peers fail a
moment later with "connection closed" errors; those are consequences, not the cause, so the
first record to be written is the root cause (a marker file created with O_EXCL decides).

A rank killed by a signal writes nothing. So each rank also leaves a `started` mark as it
begins and an `ended` mark (with its status) as it leaves: a rank that started and never
ended died from outside (a signal, the out-of-memory killer). The spawn launcher, parent of
its ranks, records the signal itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Optional, TextIO

from .launch_plan import ERROR_DIR_VAR

FIRST_MARKER = "first"
RESULT_FILE = "result.pickle"  # rank 0's return value, for scaletrain.launch(fn)


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


def _folder(error_dir: Optional[str]) -> Optional[Path]:
    """The launcher's folder, or None (no launcher waiting, or a host that does not share
    the launcher's /tmp)."""
    return Path(error_dir) if error_dir and Path(error_dir).is_dir() else None


def _write(path: Path, record: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def write_record(error_dir: Optional[str], rank: int, summary: str, text: str, *, pid: Optional[int] = None,
                 killed: bool = False, status: int = 1, guessed: bool = False,
                 explained: bool = False, said: bool = False) -> Optional[dict]:
    """Writes a rank's failure record; returns it, or None when there is no folder.
    `killed`: written by the launcher for a rank a signal killed, the cause whenever its
    peers' errors (written earlier, as they noticed it gone) claim to be first.
    `explained`: the rank said why in its own words (scaletrain's one-line usage errors):
    the launcher adds nothing to it; `said`: that line is `summary`, for the launcher to
    show (else the rank printed it)."""
    folder = _folder(error_dir)
    if folder is None:
        return None
    record = {"rank": rank, "host": socket.gethostname(), "pid": pid or os.getpid(), "time": time.time(),
              "summary": summary, "traceback": text, "first": killed or _claim_first(folder), "killed": killed,
              "status": status, "guessed": guessed, "explained": explained, "said": said}
    # Host and pid in the name: ranks on different hosts may share a folder (and a rank number
    # never repeats within a job, but a restarted rank's pid differs).
    _write(folder / f"rank-{rank}-{record['host']}-{record['pid']}.json", record)
    return record


_usage_error_recorded = False


def say_usage_error(message: str) -> None:
    """A one-line mistake (`scaletrain: error: MESSAGE`, exit status 2) found by a rank: it
    goes to the launcher's folder, and the launcher shows each different line once, so N
    ranks that find the same mistake print it once. Printed here when no launcher reads
    the folder (a rank of torchrun, mpirun or srun started directly, a host without it)."""
    global _usage_error_recorded
    rank = os.environ.get("RANK", "")
    folder = _folder(os.environ.get(ERROR_DIR_VAR))
    if folder is None or not rank.isdigit():
        print(f"scaletrain: error: {message}", file=sys.stderr, flush=True)
        return
    write_record(str(folder), int(rank), message, "", status=2, explained=True, said=True)
    _usage_error_recorded = True


def usage_error_recorded() -> bool:
    """Whether this process handed a one-line error to its launcher (say_usage_error)."""
    return _usage_error_recorded


def note_sigterm(error_dir: Optional[str], rank: int) -> None:
    """From now on a SIGTERM (or a SIGHUP, its twin: a closed terminal) leaves a trace in the
    launcher's folder before it ends this process: written by faulthandler, in C, so even a
    main thread blocked in a collective leaves it. A rank that got SIGTERM was stopped (by
    its launcher, after another rank's failure, or by the user), which is never the cause
    of a failure. A SIGHUP that `nohup` told us to ignore stays ignored."""
    import faulthandler
    import signal as signals

    folder = _folder(error_dir)
    if folder is not None:
        trace = open(folder / f"sigterm-{rank}-{socket.gethostname()}-{os.getpid()}.trace", "w")
        for signum in (signals.SIGTERM, signals.SIGHUP):
            if signals.getsignal(signum) != signals.SIG_IGN:
                faulthandler.register(signum, file=trace, all_threads=False, chain=True)


def _got_sigterm(folder: Path, m: dict) -> bool:
    path = folder / f"sigterm-{m['rank']}-{m['host']}-{m['pid']}.trace"
    return path.exists() and path.stat().st_size > 0


def mark(error_dir: Optional[str], rank: int, stage: str, status: Optional[int] = None) -> None:
    """`started` / `ended` marks of this rank (see the module docstring)."""
    folder = _folder(error_dir)
    if folder is not None:
        host, pid = socket.gethostname(), os.getpid()
        _write(folder / f"{stage}-{rank}-{host}-{pid}.mark",
               {"rank": rank, "host": host, "pid": pid, "status": status, "time": time.time()})


def read_records(error_dir: str) -> list[dict]:
    records = []
    for path in Path(error_dir).glob("rank-*.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    # A rank killed by a signal leads, then the claimed first failure; the rest in the
    # order they happened.
    return sorted(records, key=lambda r: (not r.get("killed"), not r.get("first"), r.get("time", 0)))


def _marks(folder: Path, stage: str) -> dict:
    found = {}
    for path in folder.glob(f"{stage}-*.mark"):
        try:
            m = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found[(m["host"], m["pid"])] = m
    return found


def any_started(error_dir: str) -> bool:
    """Whether a rank of this host has started (its runner left a `started` mark)."""
    return any(Path(error_dir).glob("started-*.mark"))


def frozen_in_teardown(error_dir: str) -> list[dict]:
    """Ranks that destroyed their process group and never ended by themselves: the
    teardown guard ended them (teardown.py)."""
    folder = Path(error_dir)
    ended = _marks(folder, "ended")
    return sorted((m for key, m in _marks(folder, "teardown").items() if key not in ended), key=lambda m: m["rank"])


def vanished(error_dir: str) -> list[dict]:
    """Ranks that started and never ended (nor left a failure record, nor got a SIGTERM):
    killed from outside, by SIGKILL or the out-of-memory killer."""
    folder = Path(error_dir)
    ended = _marks(folder, "ended")
    recorded = {(r["host"], r["pid"]) for r in read_records(error_dir)}
    frozen = _marks(folder, "teardown")
    return sorted((m for key, m in _marks(folder, "started").items()
                   if key not in ended and key not in recorded and key not in frozen and not _got_sigterm(folder, m)),
                  key=lambda m: m["rank"])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def note_vanished(error_dir: str) -> None:
    """Called while the job runs (this host's ranks): the first ranks found gone without a
    word, before any rank recorded a failure, get a record naming them as the cause. Ranks
    that go later were stopped because of that failure, and are not named. The record is a
    guess (a program may also end itself with os._exit): it counts only if the job fails."""
    if read_records(error_dir):
        return
    host = socket.gethostname()
    for m in vanished(error_dir):
        if m["host"] == host and not _alive(m["pid"]):
            write_record(error_dir, m["rank"], "ended without a word: killed by a signal (SIGKILL?) or by the "
                         "out-of-memory killer", "", pid=m["pid"], killed=True, guessed=True)


def signal_summary(exit_code: int) -> str:
    """'killed by SIGKILL (exit status -9)' for a negative exit code (a signal)."""
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    return f"killed by {name} (exit status {exit_code})"


def report(records: list[dict], exit_status: int, launcher: str = "the launcher",
           stream: Optional[TextIO] = None) -> None:
    """The first failing rank's traceback first, with its host; then one line per later failure.
    When the first failure was a rank's one-line error: that line, and any other rank's
    different one, each once (say_usage_error); "rank N failed: exited with status 2" lines
    would only bury them."""
    stream = stream or sys.stderr  # this process's stderr now (not the one there was at import)
    if records and records[0].get("explained"):
        said = dict.fromkeys(r["summary"] for r in records if r.get("said"))
        for message in said:
            print(f"scaletrain: error: {message}", file=stream)
        return
    if not records:
        if exit_status:
            print(f"scaletrain: the job failed (exit status {exit_status}) and no rank left a traceback; "
                  f"see {launcher}'s output above", file=stream)
        return
    first, *others = records
    print(f"scaletrain: rank {first['rank']} on host {first['host']} failed first: {first['summary']}", file=stream)
    if first["traceback"]:
        print(first["traceback"].rstrip(), file=stream)
    for r in others:
        print(f"scaletrain: then rank {r['rank']} on host {r['host']} failed: {r['summary']}", file=stream)
