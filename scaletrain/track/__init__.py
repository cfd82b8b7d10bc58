"""Experiment trackers: where a run's scalars, configuration and summary go besides
metrics.jsonl. `open_trackers(["tensorboard", "csv"], out)` gives one `Trackers` value that
forwards to each; on ranks other than 0 it holds none and does nothing.

Each tool's package is an optional extra, imported only by the rank that uses it; a
missing one is a UsageError naming the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ..foundation.errors import UsageError
from ..foundation.safe_files import disk_full, is_disk_full, writing
from .base import Tracker


@dataclass(frozen=True)
class TrackerKind:
    name: str
    module: str  # scaletrain's module holding the class
    cls: str
    needs: Optional[str]  # the top-level package that must be importable
    extra: Optional[str]  # scaletrain's extra that installs it


KINDS: dict[str, TrackerKind] = {k.name: k for k in (
    TrackerKind("tensorboard", "tensorboard_tracker", "TensorBoardTracker", "tensorboard", "tensorboard"),
    TrackerKind("wandb", "wandb_tracker", "WandbTracker", "wandb", "wandb"),
    TrackerKind("mlflow", "mlflow_tracker", "MlflowTracker", "mlflow", "mlflow"),
    TrackerKind("csv", "csv_tracker", "CsvTracker", None, None),
)}

TRACKER_NAMES = tuple(KINDS)

TrackerSpec = Union[str, Tracker]


def check_trackers(specs: Iterable[TrackerSpec]) -> None:
    """Refuses unknown names and trackers whose package is missing, without importing it."""
    for spec in specs:
        if isinstance(spec, str):
            kind = KINDS.get(spec)
            if kind is None:
                raise UsageError(f"unknown tracker {spec!r}; choose from: {', '.join(TRACKER_NAMES)}")
            if kind.needs and not _installed(kind.needs):
                raise UsageError(f"tracker {spec!r} needs the {kind.needs} package, which is not installed; "
                                 f"install it with: pip install 'scaletrain[{kind.extra}]'")
        elif not isinstance(spec, Tracker):
            raise UsageError(f"a tracker is one of {', '.join(TRACKER_NAMES)} or an object with log_config, log "
                             f"and finish methods, not {spec!r}")


#: What a tracker that cannot be reached (a tracking server that is down) does to a run:
#: stop it before it starts, in one line, or let it train without that tracker, with a note.
UNREACHABLE_CHOICES = ("stop", "skip")


def unreachable(specs: Iterable[TrackerSpec]) -> dict[str, str]:
    """name -> why, for each named tracker whose server does not answer (in seconds)."""
    found = {}
    if "mlflow" in list(specs):
        from .mlflow_tracker import server_problem

        problem = server_problem()
        if problem:
            found["mlflow"] = problem
    return found


def check_reachable(specs: Sequence[TrackerSpec], if_unreachable: str = "stop") -> list:
    """The trackers to open: all of `specs`, once every server they name answers; else a
    UsageError (stop), or `specs` without the unreachable ones and a note for each (skip)."""
    problems = unreachable(specs)
    if problems and if_unreachable != "skip":
        name, why = next(iter(problems.items()))
        raise UsageError(f"--tracker {name}: {why}; or unset MLFLOW_TRACKING_URI to write OUT/mlruns instead, "
                         "or train without it: --if-tracker-unreachable skip")
    for name, why in problems.items():
        print(f"scaletrain: note: {why}; training without the {name} tracker (--if-tracker-unreachable skip)",
              file=sys.stderr, flush=True)
    return [spec for spec in specs if not (isinstance(spec, str) and spec in problems)]


def _installed(package: str) -> bool:
    if package in sys.modules:  # also None there: an import that is known to fail
        return sys.modules[package] is not None
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def open_trackers(specs: Sequence[TrackerSpec], directory: Path, run_name: Optional[str] = None,
                  active: bool = True) -> "Trackers":
    """Trackers writing under `directory` (inactive: none, on ranks other than 0)."""
    check_trackers(specs)
    if not active or not specs:
        return Trackers([])
    check_reachable(specs)  # found in seconds, not after a client's minutes of retries
    directory = Path(directory)
    name = run_name or directory.absolute().name
    opened = []
    for spec in dict.fromkeys(specs):  # each once, in the order given
        if isinstance(spec, str):
            kind = KINDS[spec]
            cls = getattr(importlib.import_module(f"{__name__}.{kind.module}"), kind.cls)
            with writing(directory):
                opened.append(cls(directory, name))
        else:
            opened.append(spec)
    return Trackers(opened)


class Trackers:
    """Forwards to every tracker; values are turned into plain floats first (tensors too).
    A tracker that cannot write because the disk is full raises DiskFull (one line); the
    trackers are then closed as far as they can be, and later calls do nothing."""

    def __init__(self, trackers: list[Tracker]):
        self.trackers = trackers
        self._finished = False

    def _each(self, call: Callable[[Tracker], None]) -> None:
        for tracker in self.trackers:
            try:
                call(tracker)
            except OSError as exc:
                if not is_disk_full(exc):
                    raise
                self._finished = True
                self._close_quietly()
                filename = getattr(exc, "filename", None)
                what = str(filename) if filename else getattr(tracker, "where", type(tracker).__name__)
                raise disk_full(what, Path(filename).parent if filename else getattr(tracker, "directory", None)) \
                    from None

    def _close_quietly(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.finish(None)
            except Exception:  # noqa: BLE001 - closing what can be closed after a failed write
                pass

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def describe(self) -> str:
        """Where each tracker writes, for the user: "tensorboard: OUT/tensorboard, ..."."""
        return ", ".join(getattr(t, "where", type(t).__name__) for t in self.trackers)

    def log_config(self, config: Mapping[str, Any]) -> None:
        if not self._finished:
            self._each(lambda tracker: tracker.log_config(config))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if not self.trackers or self._finished:
            return
        scalars = {name: _scalar(name, value) for name, value in metrics.items()}
        self._each(lambda tracker: tracker.log(scalars, int(step)))

    def resumed(self, step: int) -> None:
        """The run continues from a checkpoint at `step`, in the folder of its earlier records."""
        self._each(lambda tracker: tracker.resumed(step) if hasattr(tracker, "resumed") else None)

    def finish(self, summary: Optional[Mapping[str, Any]] = None) -> None:
        """Once; later calls do nothing (Run.close finishes whatever the loop did not)."""
        if self._finished:
            return
        self._finished = True
        if summary is not None:
            summary = {k: v for k, v in summary.items() if not (isinstance(v, float) and not math.isfinite(v))}
        self._each(lambda tracker: tracker.finish(summary))


def _scalar(name: str, value: Any) -> float:
    if hasattr(value, "item"):  # a tensor or a NumPy number
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"run.log: {name!r} must be a number (or a one-element tensor), got {value!r}")
    return float(value)
