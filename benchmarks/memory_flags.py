"""The memory flags of the benchmarks that compare predicted memory with measured peaks
(memory_check.py, auto_check.py): by default none — `scaletrain plan` and `scaletrain train`
run as a user runs them, with the default allocator (tcmalloc where installed) — or
`--steady-memory` (glibc's allocator with its mmap threshold fixed), or another
`--allocator NAME`, given to every plan and train they run."""

from __future__ import annotations

import argparse

#: The flags given to every plan and train (empty: the defaults).
FLAGS: list[str] = []


def add_memory_flag_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steady-memory", action="store_true",
                   help="run plan and train with --steady-memory (glibc's allocator, mmap threshold fixed)")
    p.add_argument("--allocator", help="run plan and train with --allocator NAME (default: theirs, auto)")


def apply_memory_flags(args: argparse.Namespace) -> None:
    FLAGS[:] = [*(["--steady-memory"] if args.steady_memory else []),
                *(["--allocator", args.allocator] if args.allocator else [])]


def with_memory_flags(argv: list[str]) -> list[str]:
    """`argv` (a scaletrain command and its flags) with the chosen flags after the command."""
    return [*argv[:1], *FLAGS, *argv[1:]]
