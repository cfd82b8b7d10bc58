"""Where checkpoints live on disk, and how a folder becomes a checkpoint atomically.

    <dir>/step-00000040/state.pt     model, optimizer, schedule, sampler position, RNG, step
    <dir>/step-00000040/meta.json    the same facts a human wants (step, epoch, world size)
    <dir>/step-00000040/COMPLETE     written last: a folder without it is not a checkpoint
    <dir>/latest                     the name of the newest complete checkpoint

A checkpoint is assembled in a hidden temporary folder, every file flushed to disk, the
COMPLETE marker written last, and only then the folder renamed to its final name and the
`latest` pointer replaced (itself by a rename). A process killed at any moment leaves
either the previous checkpoint or the new one, never a torn one that looks complete.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..files import write_text_atomic

STATE_FILE = "state.pt"
META_FILE = "meta.json"
MARKER_FILE = "COMPLETE"
LATEST_FILE = "latest"
CHECKPOINTS_DIR = "checkpoints"
_NAME_RE = re.compile(r"^step-(\d+)$")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def is_complete(folder: Path) -> bool:
    return (folder / MARKER_FILE).is_file() and (folder / STATE_FILE).is_file()


def fsync_dir(folder: Path) -> None:
    """Makes a rename inside `folder` durable (the directory entry itself is data)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_staging_folder(directory: Path, step: int) -> Path:
    """A hidden folder next to the final one (same filesystem, so the rename is atomic)."""
    directory.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{checkpoint_name(step)}.", suffix=".tmp", dir=directory))


def publish(staging: Path, directory: Path, step: int) -> Path:
    """Marker last, rename into place, then point `latest` at it."""
    write_text_atomic(staging / MARKER_FILE, f"{step}\n")
    fsync_dir(staging)
    final = directory / checkpoint_name(step)
    if final.exists():  # the same step saved again (e.g. after a restart): replace it whole
        old = directory / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(staging, final)
    fsync_dir(directory)
    write_text_atomic(directory / LATEST_FILE, final.name + "\n")
    fsync_dir(directory)
    return final


def complete_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        m = _NAME_RE.match(child.name)
        if m and child.is_dir() and is_complete(child):
            found.append((int(m.group(1)), child))
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: Path) -> Optional[Path]:
    """The checkpoint `latest` names if it is complete; else the newest complete one (the
    pointer may be missing if a save died between the rename and the pointer update)."""
    pointer = directory / LATEST_FILE
    if pointer.is_file():
        named = directory / pointer.read_text().strip()
        if named.parent == directory and is_complete(named):
            return named
    found = complete_checkpoints(directory)
    return found[-1] if found else None


def prune(directory: Path, keep: int) -> None:
    """Keeps the newest `keep` complete checkpoints; removes leftovers of interrupted saves."""
    for old in complete_checkpoints(directory)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    for child in directory.iterdir():
        if child.name.startswith(".step-") and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)


def resolve_source(source: Path) -> Optional[Path]:
    """A checkpoint folder from what the user named: the checkpoint itself, a folder of
    checkpoints (its latest), or a run's output folder (its checkpoints/ latest).
    None when nothing complete is there."""
    source = Path(source)
    if is_complete(source):
        return source
    for directory in (source, source / CHECKPOINTS_DIR):
        found = latest_checkpoint(directory)
        if found is not None:
            return found
    return None
