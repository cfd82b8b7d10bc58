"""Reading and writing checkpoint files so that a tampered one cannot run code.

`torch.save` writes a pickle, and an ordinary `pickle.load` runs whatever a pickle tells it
to. `torch.load(weights_only=True)` uses a restricted unpickler that only rebuilds tensors
and plain containers (dict, list, tuple, str, numbers, None) and refuses anything else
before calling it. Everything scaletrain stores in `state.pt` is kept to those types.

The sharded format's own doors are closed in dcp_reading.py.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ..foundation.errors import UsageError


class CheckpointError(UsageError):
    """A checkpoint that cannot (or must not) be loaded, or cannot be written: missing,
    torn, corrupted, tampered with, for another model, or no room on the disk. Rank 0
    decides and every rank raises it alike."""

    same_on_every_rank = True


def save_state(obj: Any, path: Path) -> None:
    """torch.save to `path`, flushed to disk before returning (the caller renames later)."""
    with open(path, "wb") as fh:
        write_state(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def write_state(obj: Any, fh: BinaryIO) -> None:
    torch.save(obj, fh)


def load_state(path: Path, mmap: bool = False) -> dict:
    """Loads a state file with the restricted unpickler; every failure is a CheckpointError
    that says what was wrong with which file. mmap=True maps the tensors instead of reading
    them (for a look at a large checkpoint)."""
    if not zipfile.is_zipfile(path):  # torn (its index is written last) or not torch.save's
        raise CheckpointError(f"cannot read {path}: not a complete checkpoint file (truncated, or not written by "
                              "torch.save); resume from another checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"refused to load {path}: it asks to run code or build objects a checkpoint never holds "
            f"({_unpickler_reason(exc)}); it may have been tampered with — use a checkpoint written by "
            "scaletrain") from None
    except (zipfile.BadZipFile, RuntimeError, EOFError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        raise CheckpointError(f"cannot read {path}: not a complete checkpoint file ({type(exc).__name__}: {first}); "
                              "resume from another checkpoint") from None
    if not isinstance(state, dict) or state.get("format") not in SUPPORTED_FORMATS or "progress" not in state:
        raise CheckpointError(f"{path} is not a checkpoint this version of scaletrain reads (no format/progress "
                              "entries, or an older format); resume from a folder written by --checkpoint-every or "
                              "run.save_checkpoint")
    return state


#: 2: model and optimizer keyed by parameter name, the optimizer flattened per parameter;
#: the model either in state.pt (full) or in the DCP folder beside it (sharded).
FORMAT = 2
SUPPORTED_FORMATS = (FORMAT,)


def _unpickler_reason(exc: Exception) -> str:
    """torch's message is a paragraph about its defaults; the reason is one line of it."""
    text = str(exc)
    for line in text.splitlines():
        if "WeightsUnpickler error:" in line:
            return line.split("WeightsUnpickler error:", 1)[1].strip().split(". ")[0][:160]
    return (text.strip().splitlines() or [type(exc).__name__])[0][:160]
