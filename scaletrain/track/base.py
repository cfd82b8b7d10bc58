"""What every tracker does: log the run's configuration once, scalars by step, and finish.

A tracker is any object with these three methods; the built-in ones wrap each tool's own
package (TensorBoard, Weights & Biases, MLflow) or write CSV files. Only rank 0 holds
trackers: N processes must not record N copies of one run.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Protocol, runtime_checkable


@runtime_checkable
class Tracker(Protocol):
    def log_config(self, config: Mapping[str, Any]) -> None:
        """The run's settings, once, near the start."""

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Scalars (names such as "train/loss") at a training step."""

    def finish(self, summary: Optional[Mapping[str, Any]] = None) -> None:
        """The run's summary, if any; then flush and close."""

# A tracker may also have `resumed(step)`: the run went back to a checkpoint at `step` and
# will log the steps after it again (TensorBoard and CSV then drop what they hold of them).


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: tools that take flat key/value pairs (MLflow's params, CSV)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric entries of a summary (booleans and text left out)."""
    out = {}
    for key, value in flatten(values).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    return out
