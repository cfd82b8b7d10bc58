"""--steady-memory for the commands that start training processes and do not declare their
settings as `TrainConfig` does (bench, plan, launch)."""

from __future__ import annotations

import argparse

from ..steady_memory import STEADY_MEMORY_HELP, pass_on


def add_steady_memory_argument(p) -> None:
    p.add_argument("--steady-memory", action="store_true", help=STEADY_MEMORY_HELP)


def apply_steady_memory(args: argparse.Namespace) -> None:
    pass_on(getattr(args, "steady_memory", False))
