"""The launch options shared by `scaletrain launch` and `scaletrain train`: generated from the
declared `LaunchSettings` (torchrun's names where torchrun has one, each also in torchrun's
underscore spelling: `--nproc_per_node`), and how a command line that is handed on to the
ranks loses them."""

from __future__ import annotations

import argparse

from ..foundation.options import add_declared_arguments, flags_of, parsed_values
from ..launchers.settings import LaunchSettings


def add_launch_arguments(p: argparse.ArgumentParser, nproc_default: str = "1") -> None:
    add_declared_arguments(p, LaunchSettings, nproc_default=nproc_default)


def launch_settings(args: argparse.Namespace) -> LaunchSettings:
    return LaunchSettings(**parsed_values(LaunchSettings, args))


def glue_launcher_args(argv: list[str]) -> list[str]:
    """`--launcher-args "--exclusive"` as `--launcher-args=--exclusive`: argparse would take a
    value that starts with a dash and has no space for an option of its own."""
    out = list(argv)
    for i, token in enumerate(out[:-1]):
        if token in ("--launcher-args", "--launcher_args"):
            out[i:i + 2] = [f"{token}={out[i + 1]}"]
            break
    return out


def strip_launch_args(argv: list[str], also: tuple = ()) -> list[str]:
    """argv without the launch options (the ranks must not launch again) nor the value
    options named in `also`."""
    takes_value, switches = flags_of(LaunchSettings)
    values = takes_value | set(also)
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if token in values:
            skip = True
        elif token in switches or (name in values and "=" in token):
            continue
        else:
            out.append(token)
    return out
