"""Durations as people write them. One rule for every duration flag and argument: a bare
number is SECONDS (`90`, `2.5`), and a unit may follow: `90s`, `10m`, `1h`."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h)?\s*$")

RULE = "a bare number is seconds; or 90s, 10m, 1h"


def parse_duration(text: str) -> float:
    """Seconds in `text`. ValueError with a readable reason otherwise (negative, zero,
    unknown unit)."""
    m = _RE.match(text)
    if not m:
        raise ValueError(f"expected a duration such as 90, 90s, 10m or 1h (a bare number is seconds), got {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds <= 0:
        raise ValueError(f"must be longer than 0, got {text!r}")
    return seconds


def as_seconds(value, name: str = "timeout") -> float:
    """A duration given to the library: a number of seconds, a `timedelta`, or a string as
    on the command line ("90s", "10m"). TypeError/ValueError naming `name` otherwise."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise TypeError(f"{name}={value!r}: give a number of seconds or a datetime.timedelta")
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise ValueError(f"{name}={value!r}: {exc}") from None
    else:
        raise TypeError(f"{name}={value!r}: give a number of seconds or a datetime.timedelta")
    if not seconds > 0:
        raise ValueError(f"{name}={value!r}: must be longer than 0 seconds")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 120 or seconds % 60:
        return f"{seconds:g}s"
    if seconds >= 7200 and not seconds % 3600:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 60:g}m"
