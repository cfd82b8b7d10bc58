"""The csv tracker: plain files any tool can read, no package needed.

    OUT/csv/metrics.csv   step,name,value,time   (one row per scalar; time: Unix seconds)
    OUT/csv/config.csv    name,value
    OUT/csv/summary.csv   name,value
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from .base import flatten


class CsvTracker:
    def __init__(self, directory: Path, run_name: str):
        self.directory = Path(directory) / "csv"
        self.directory.mkdir(parents=True, exist_ok=True)
        # Line-buffered: a run that is killed keeps every row written so far.
        self._file = open(self.directory / "metrics.csv", "a", newline="", buffering=1)
        self._rows = csv.writer(self._file)
        if self._file.tell() == 0:
            self._rows.writerow(["step", "name", "value", "time"])

    @property
    def where(self) -> str:
        return f"csv: {self.directory}"

    def log_config(self, config: Mapping[str, Any]) -> None:
        _write_pairs(self.directory / "config.csv", flatten(config))

    def resumed(self, step: int) -> None:
        """Rows of the steps after `step` go: they are about to be logged again."""
        self._file.close()
        path = self.directory / "metrics.csv"
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
        kept = rows[:1] + [row for row in rows[1:] if row and row[0].isdigit() and int(row[0]) <= step]
        with open(path, "w", newline="") as fh:
            csv.writer(fh).writerows(kept)
        self._file = open(path, "a", newline="", buffering=1)
        self._rows = csv.writer(self._file)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        now = round(time.time(), 3)
        for name, value in metrics.items():
            self._rows.writerow([step, name, repr(float(value)), now])

    def finish(self, summary: Optional[Mapping[str, Any]] = None) -> None:
        if summary is not None:
            _write_pairs(self.directory / "summary.csv", flatten(summary))
        self._file.close()


def _write_pairs(path: Path, pairs: Mapping[str, Any]) -> None:
    with open(path, "w", newline="") as fh:
        rows = csv.writer(fh)
        rows.writerow(["name", "value"])
        rows.writerows((name, "" if value is None else value) for name, value in pairs.items())
