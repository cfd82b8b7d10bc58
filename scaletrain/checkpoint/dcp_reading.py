"""Reading the sharded format of torch.distributed.checkpoint (DCP) so that a tampered
checkpoint cannot run code.

DCP has two doors of its own: its `.metadata` file is read with a plain `pickle.load`, and
its non-tensor entries with `torch.load(weights_only=False)`. `SafeReader` reads the
metadata with an unpickler that accepts only DCP's own metadata classes (and the torch types
they hold), and `SafeLoadPlanner` reads non-tensor entries with `weights_only=True`
(scaletrain writes none: they go into `state.pt`).

Imported only where a sharded checkpoint is read: DCP takes most of a second to import,
which no process that never reads one should pay.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from .safe_io import CheckpointError, _unpickler_reason


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
    allowed[("collections", "OrderedDict")] = collections.OrderedDict
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
