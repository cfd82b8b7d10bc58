"""Checkpoints that survive being killed mid-write, refuse to run code when loaded, and
resume on another number of processes. See docs/fault-tolerance.md."""

from .checkpointer import DEFAULT_KEEP, Checkpointer
from .layout import CHECKPOINTS_DIR, latest_checkpoint, resolve_source
from .safe_io import CheckpointError, load_state

__all__ = ["Checkpointer", "CheckpointError", "DEFAULT_KEEP", "CHECKPOINTS_DIR", "latest_checkpoint",
           "resolve_source", "load_state"]
