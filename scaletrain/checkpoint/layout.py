"""Where checkpoints live on disk, and how a folder becomes a checkpoint atomically.

    <dir>/step-00000040/state.pt        step, data position, RNG, schedule; the model and
                                        optimizer too in the full format
    <dir>/step-00000040/shards/         the sharded format: model and optimizer tensors,
                                        one file per rank (torch.distributed.checkpoint)
    <dir>/step-00000040/meta.json       the same facts a human wants (step, world size, ...)
    <dir>/step-00000040/checksums.json  a CRC-32 per file, verified before loading
    <dir>/step-00000040/COMPLETE        written last: a folder without it is not a checkpoint
    <dir>/latest                        the name of the newest complete checkpoint

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

from ..foundation.safe_files import default_mode, write_text_atomic

STATE_FILE = "state.pt"
SHARDS_DIR = "shards"
META_FILE = "meta.json"
MARKER_FILE = "COMPLETE"
LATEST_FILE = "latest"
CHECKPOINTS_DIR = "checkpoints"
_NAME_RE = re.compile(r"^step-(\d+)$")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(folder: Path) -> Optional[int]:
    m = _NAME_RE.match(Path(folder).name)
    return int(m.group(1)) if m else None


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
    """A hidden folder next to the final one (same filesystem, so the rename is atomic),
    with the permissions an ordinary mkdir gives (mkdtemp's are private)."""
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{checkpoint_name(step)}.", suffix=".tmp", dir=directory))
    os.chmod(staging, default_mode(0o777))
    return staging


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
        step = step_of(child)
        if step is not None and child.is_dir() and is_complete(child):
            found.append((step, child))
    return [path for _, path in sorted(found)]


def read_latest(directory: Path) -> tuple[Optional[Path], Optional[str]]:
    """(the complete checkpoint `latest` names, or None; a note when the pointer is unusable)."""
    pointer = directory / LATEST_FILE
    if not pointer.exists():
        return None, None
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None, f"{pointer} is unreadable; ignored it"
    named = directory / name
    if not _NAME_RE.match(name) or not is_complete(named):
        return None, f"{pointer} names no complete checkpoint ({name[:40]!r}); ignored it"
    return named, None


def candidates(directory: Path) -> tuple[list[Path], list[str]]:
    """Checkpoints to resume from, best first: the one `latest` names, then the complete
    ones older than it, newest first. (Newer ones than `latest` belong to a line of work that
    was abandoned when an older checkpoint was resumed.) Also notes on an unusable pointer."""
    named, note = read_latest(directory)
    found = complete_checkpoints(directory)
    if named is not None:
        cutoff = step_of(named)
        older = [p for p in found if step_of(p) < cutoff]
        return [named, *reversed(older)], []
    return list(reversed(found)), [note] if note else []


def latest_checkpoint(directory: Path) -> Optional[Path]:
    """The checkpoint to resume from, without verifying its files (see Checkpointer.load)."""
    found, _ = candidates(directory)
    return found[0] if found else None


def prune(directory: Path, keep: int) -> None:
    """Keeps the newest `keep` complete checkpoints; removes leftovers of interrupted saves."""
    for old in complete_checkpoints(directory)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    for child in directory.iterdir():
        if child.name.startswith(".step-") and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)


def source_candidates(source: Path) -> tuple[list[Path], list[str]]:
    """Checkpoints from what the user named: the checkpoint itself, a folder of checkpoints,
    or a run's output folder (its checkpoints/), best first; notes on what was ignored."""
    source = Path(source)
    if is_complete(source):
        return [source], []
    for directory in (source, source / CHECKPOINTS_DIR):
        found, notes = candidates(directory)
        if found:
            return found, notes
    return [], []


def resolve_source(source: Path) -> Optional[Path]:
    """The best checkpoint folder for what the user named (unverified), or None."""
    found, _ = source_candidates(source)
    return found[0] if found else None
