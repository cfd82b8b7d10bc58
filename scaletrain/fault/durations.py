"""Durations as people write them: `30` (minutes), `45s`, `5m`, `1.5h`."""

from __future__ import annotations

import re

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h)?\s*$")


def parse_duration(text: str, default_unit: str = "m") -> float:
    """Seconds in `text`; a bare number is in `default_unit`. ValueError with a readable
    reason otherwise (negative, zero, unknown unit)."""
    m = _RE.match(text)
    if not m:
        raise ValueError(f"expected a duration such as 30s, 5m or 1h (a bare number means minutes), got {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or default_unit]
    if seconds <= 0:
        raise ValueError(f"must be longer than 0, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 120 or seconds % 60:
        return f"{seconds:g}s"
    return f"{seconds / 60:g}m"
