"""Reading and writing checkpoint files so that a tampered one cannot run code.

`torch.save` writes a pickle, and an ordinary `pickle.load` runs whatever a pickle tells it
to. `torch.load(weights_only=True)` uses a restricted unpickler that only rebuilds tensors
and plain containers (dict, list, tuple, str, numbers, None) and refuses anything else
before calling it. Everything scaletrain stores in `state.pt` is kept to those types.

The sharded format of torch.distributed.checkpoint (DCP) has two more doors, both closed
here: its `.metadata` file is read by DCP with a plain `pickle.load`, and its non-tensor
entries with `torch.load(weights_only=False)`. `SafeReader` reads the metadata with an
unpickler that accepts only DCP's own metadata classes (and the torch types they hold),
and `SafeLoadPlanner` reads non-tensor entries with `weights_only=True` (scaletrain writes
none: they go into `state.pt`).
"""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from ..errors import UsageError


class CheckpointError(UsageError):
    """A checkpoint that cannot (or must not) be loaded, or cannot be written: missing,
    torn, corrupted, tampered with, for another model, or no room on the disk."""


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


# -- the sharded format's doors -------------------------------------------------------------

def _metadata_classes() -> dict[tuple[str, str], Any]:
    """Exactly what a DCP .metadata file may name: DCP's metadata dataclasses and enums,
    the storage record of its file writer, torch.Size, the dtypes, the layout helper."""
    allowed: dict[tuple[str, str], Any] = {}
    for name in dir(dcp_metadata):
        value = getattr(dcp_metadata, name)
        if isinstance(value, type) and value.__module__ == dcp_metadata.__name__ and (
                dataclasses.is_dataclass(value) or issubclass(value, enum.Enum)):
            allowed[(dcp_metadata.__name__, name)] = value
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    allowed[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] = _StorageInfo
    allowed[("torch", "Size")] = torch.Size
    for name in dir(torch):
        if isinstance(getattr(torch, name, None), torch.dtype):
            allowed[("torch", name)] = getattr(torch, name)
    allowed[("torch.serialization", "_get_layout")] = torch.serialization._get_layout
    allowed[("pathlib", "PosixPath")] = Path  # DCP records the checkpoint's own path
    allowed[("collections", "OrderedDict")] = __import__("collections").OrderedDict
    return allowed


class _MetadataUnpickler(pickle.Unpickler):
    allowed: dict = {}

    def find_class(self, module: str, name: str):
        found = self.allowed.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")
        return found


def load_metadata(path: Path) -> dcp_metadata.Metadata:
    """A DCP .metadata file, through the restricted unpickler."""
    if not _MetadataUnpickler.allowed:
        _MetadataUnpickler.allowed = _metadata_classes()
    try:
        with open(path, "rb") as fh:
            found = _MetadataUnpickler(fh).load()
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"refused to load {path}: {exc}; it may have been tampered with — use a checkpoint "
                              "written by scaletrain") from None
    except (OSError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise CheckpointError(f"cannot read {path}: not a complete checkpoint metadata file "
                              f"({type(exc).__name__}); resume from another checkpoint") from None
    if not isinstance(found, dcp_metadata.Metadata):
        raise CheckpointError(f"{path} is not a checkpoint's metadata (it holds a {type(found).__name__})")
    return found


class SafeReader(FileSystemReader):
    """DCP's file reader, with its metadata read by the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
        rank = kwargs.get("rank")
        metadata = load_metadata(Path(self._get_metadata_path(rank)))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = dcp_metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, with non-tensor entries read by torch's restricted unpickler."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise CheckpointError(f"refused to load an entry of the checkpoint ({_unpickler_reason(exc)}); it may "
                                  "have been tampered with") from None
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import set_element  # DCP's own helper

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded
