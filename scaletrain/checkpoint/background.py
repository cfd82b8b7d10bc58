"""Checkpoints written while training goes on: the state is copied into host memory (the
training step waits only for that copy), and a thread writes it out.

- Staging: one host copy of the state, made once and refilled at every later save (pinned
  memory on CUDA, so the copy from the GPU runs at full speed and without a second copy by
  the driver). While a save is in flight its copy must not change, so the next save waits
  for it first: at most one save is in flight per process.
- Writing: a thread that is not a daemon, so the interpreter finishes a save still writing
  before the process ends, even when the program forgets to wait for it.
- Its collectives (DCP's planning, every rank's checksums for rank 0) go through a Gloo
  group of their own: the training thread's collectives on the run's group carry on beside
  them, in whatever order, on every rank.

The outcome (the checkpoint's folder, or the error that kept it from being written) is
collected by the next save, by `wait`, or at the end of the run.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Callable, Optional

import torch


class HostStaging:
    """A host copy of a state dict (tensors, DTensors' local shares, nested dicts, other
    values as they are), reused while the state keeps its structure."""

    def __init__(self) -> None:
        self._copy: Optional[dict] = None
        self._signature: Optional[tuple] = None

    def stage(self, state: dict) -> dict:
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        pinned = torch.cuda.is_available()
        signature = _signature(state)
        if self._copy is None or signature != self._signature:
            self._copy = _create_cpu_state_dict(state, pin_memory=pinned)
            self._signature = signature
        staged = _copy_state_dict(state, self._copy, non_blocking=pinned)
        if pinned:
            torch.cuda.synchronize()  # the copies from the GPU have landed before training changes the source
        return staged


def _signature(value: Any) -> tuple:
    """What must stay the same for a staged copy to be refilled: keys, shapes, dtypes."""
    if isinstance(value, dict):
        return tuple((key, _signature(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_signature(item) for item in value)
    if isinstance(value, torch.Tensor):
        local = value.to_local() if hasattr(value, "to_local") else value
        return ("tensor", tuple(local.shape), local.dtype)
    return ("value",)


class BackgroundSaves:
    """One process's checkpoints being written in the background: at most one at a time."""

    def __init__(self, timeout: Optional[timedelta] = None) -> None:
        self.staging = HostStaging()
        self.timeout = timeout
        self._group = None
        self._thread: Optional[threading.Thread] = None
        self._outcome: Any = None
        self.step: Optional[int] = None  # the step of the save started last, until it is settled
        self.unsettled = False

    @property
    def in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def group(self):
        """The Gloo group the writing threads talk over (collective: made on first use, when
        every rank starts its first asynchronous save)."""
        import torch.distributed as dist

        if self._group is None and dist.is_initialized() and dist.get_world_size() > 1:
            from ..foundation.defaults import BACKGROUND_GROUP

            kwargs = {"timeout": self.timeout} if self.timeout is not None else {}
            self._group = dist.new_group(backend="gloo", group_desc=f"{BACKGROUND_GROUP}: checkpoint writer", **kwargs)
        return self._group

    def start(self, step: int, work: Callable[[], Any]) -> None:
        """Runs `work` in the writing thread; its return value (or the exception it raised)
        is the outcome. The caller has waited for the previous save."""
        assert not self.in_flight, "a checkpoint is still being written"

        def run() -> None:
            try:
                self._outcome = work()
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread as the outcome
                self._outcome = exc

        self.step, self.unsettled, self._outcome = step, True, None
        self._thread = threading.Thread(target=run, name=f"scaletrain-checkpoint-{step}", daemon=False)
        self._thread.start()

    def wait(self) -> tuple[Any, float]:
        """(the outcome of the save started last, seconds spent waiting for it)."""
        began = time.perf_counter()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self._outcome, time.perf_counter() - began

    def settle(self) -> tuple[Any, float]:
        """Waits as `wait`, and marks the outcome as collected."""
        outcome, waited = self.wait()
        self.unsettled = False
        return outcome, waited
