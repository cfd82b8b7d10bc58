"""Writing files so that a crash never leaves a half-written one behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


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
