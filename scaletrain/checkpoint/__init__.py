"""Checkpoints that survive being killed mid-write, refuse to run code when loaded, verify
their bytes, and resume on another number of processes or another strategy. See
docs/fault-tolerance.md."""

from .checkpointer import DEFAULT_KEEP, LAYOUTS, Checkpointer
from .layout import CHECKPOINTS_DIR, latest_checkpoint, resolve_source
from .safe_io import CheckpointError, load_state

__all__ = ["Checkpointer", "CheckpointError", "DEFAULT_KEEP", "LAYOUTS", "CHECKPOINTS_DIR", "latest_checkpoint",
           "resolve_source", "load_state"]
