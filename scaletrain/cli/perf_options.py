"""--allocator and --steady-memory for the commands that start training processes and do not
declare their settings as `TrainConfig` does (bench, plan, launch)."""

from __future__ import annotations

import argparse

from ..memory import allocator
from ..memory.steady import STEADY_MEMORY_HELP, pass_on


def add_process_memory_arguments(p) -> None:
    p.add_argument("--allocator", choices=allocator.NAMES, default="auto", help=allocator.ALLOCATOR_HELP)
    p.add_argument("--steady-memory", action="store_true", help=STEADY_MEMORY_HELP)


def apply_process_memory(args: argparse.Namespace) -> str:
    """Every process this command starts inherits the choices (their environment); returns
    the allocator they run with."""
    pass_on(getattr(args, "steady_memory", False))
    return allocator.pass_on(getattr(args, "allocator", "auto"), getattr(args, "steady_memory", False))


def process_memory_flags(args: argparse.Namespace) -> list[str]:
    """The two as `scaletrain train` flags, where not the defaults (a command that trains what was measured)."""
    asked = getattr(args, "allocator", "auto")
    return [*(["--allocator", asked] if asked != "auto" else []),
            *(["--steady-memory"] if getattr(args, "steady_memory", False) else [])]
