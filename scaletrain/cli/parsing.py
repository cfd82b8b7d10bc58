"""argparse, made to fail in one line: what was wrong and how to fix it, exit status 2.
Abbreviated options are refused everywhere (`--nproc` is not `--nproc-per-node`): an
abbreviation accepted here would be passed on, unrecognised, to the ranks' command line."""

from __future__ import annotations

import argparse
import sys

from ..fault.durations import parse_duration


class OneLineParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's default prints the whole usage first
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def with_underscores(*flags: str) -> tuple[str, ...]:
    """The flags, plus torchrun's underscore spelling of each (`--nproc_per_node`)."""
    spelled = list(flags)
    for flag in flags:
        if flag.startswith("--") and "-" in flag[2:]:
            spelled.append("--" + flag[2:].replace("-", "_"))
    return tuple(spelled)


def positive_int(text: str) -> int:
    return whole_number(text, minimum=1)


def non_negative_int(text: str) -> int:
    return whole_number(text, minimum=0)


def whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}" if minimum
                                         else f"must be 0 or more, got {value}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is at most 65535, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def duration(text: str) -> float:
    """Seconds: a bare number is seconds; 90s, 10m, 1h are accepted too."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fail(message: str) -> int:
    print(f"scaletrain: error: {message}", file=sys.stderr)
    return 2
