"""What a run records and says, as methods of `Run`: scalars and its settings to the
experiment trackers `init` opened (rank 0 records), and lines printed once."""

from __future__ import annotations

from typing import Any, Mapping, Optional


class RunRecords:
    """Mixed into Run: uses its `trackers`, `steps_taken` and `is_main`."""

    def log(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        """Scalars ({"train/loss": 0.31, ...}; numbers or one-element tensors) to the trackers
        given to init, at `step` (default: train_step calls so far). Rank 0 records; on other
        ranks it does nothing, so reduce first (`run.mean(loss)`) for a value of all ranks."""
        self.trackers.log(metrics, self.steps_taken if step is None else step)

    def log_config(self, config: Mapping[str, Any]) -> None:
        """The run's settings, once (rank 0 records)."""
        self.trackers.log_config(config)

    def print(self, *args, **kwargs) -> None:
        """print() on rank 0 only, so N processes do not print N copies."""
        if self.is_main:
            kwargs.setdefault("flush", True)
            print(*args, **kwargs)
