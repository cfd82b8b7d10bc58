"""The run's output folder: checked before anything starts, created only once all is valid."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import UsageError


def default_out(strategy: str, nproc: int, root: Path = Path("runs")) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = root / f"{stamp}-{strategy}-{nproc}p"
    n = 1
    while candidate.exists():
        n += 1
        candidate = root / f"{stamp}-{strategy}-{nproc}p-{n}"
    return candidate


def check_out(out: Path) -> Path:
    """Refuses a folder that holds files already or cannot be written; creates nothing."""
    out = Path(out).expanduser().absolute()
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--out {out} is a file, not a folder; choose a folder path")
        if any(out.iterdir()):
            raise UsageError(f"--out {out} already holds files; choose a new folder (or leave --out out)")
        if not os.access(out, os.W_OK | os.X_OK):
            raise UsageError(f"--out {out} cannot be written (permission denied); choose a writable folder")
        return out
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out} cannot be created: {parent} is not a writable folder; choose another --out")
    return out


def create_out(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out} cannot be created ({exc.strerror}); choose another --out") from None
    return out
