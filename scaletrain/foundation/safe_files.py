"""Writing files so that a crash never leaves a half-written one behind, and a full disk is
one line (DiskFull: exit status 2, never retried), not a traceback."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from .errors import UsageError


class DiskFull(UsageError):
    """A run's file (metrics, a tracker's, the summary) could not be written: the disk is
    full. A restart would fail the same way, so, like a usage error, exit status 2."""


def is_disk_full(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc)


def disk_full(what: str, where: Optional[Path] = None, started: bool = True) -> DiskFull:
    """The one line: what could not be written, the room left, and the fix. `started`:
    False before training began (nothing to continue from)."""
    free = ""
    folder = Path(where) if where is not None else None
    while folder is not None and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder is not None:
        with contextlib.suppress(OSError):
            free = f" ({shutil.disk_usage(folder).free / 1e6:.1f} MB free)"
    if not started:
        return DiskFull(f"cannot write {what}: the disk is full{free}; nothing was started; free some space or choose "
                        "an --out on a disk with room")
    return DiskFull(f"cannot write {what}: the disk is full{free}; training stopped there; free some space or choose "
                    "an --out on a disk with room (a run with checkpoints continues from its newest one with "
                    "--resume auto)")


@contextlib.contextmanager
def writing(path: Path):
    """Around a write of `path`: a full disk becomes DiskFull naming it."""
    try:
        yield
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise disk_full(str(path), Path(path).parent) from None


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, flush it to disk, then rename over the
    target: readers see the old file or the new one, never a torn one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); give it the mode an ordinary write would.
        os.fchmod(fd, default_mode(0o666))
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def default_mode(mode: int) -> int:
    """`mode` as the umask leaves it: what an ordinary open() or mkdir() would give."""
    current = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(current)
    return mode & ~current


def append_jsonl(path: Path, obj: Any) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(obj, sort_keys=True) + "\n")
