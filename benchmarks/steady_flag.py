"""`--steady-memory` for the benchmarks that compare predicted memory with measured peaks
(memory_check.py, auto_check.py): given to every `scaletrain plan` and `scaletrain train` they
run, unless `--glibc-default` asks for glibc's own allocator behaviour."""

from __future__ import annotations

import argparse

#: `--steady-memory` (the default) or nothing (`--glibc-default`).
STEADY = ["--steady-memory"]


def add_glibc_default_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--glibc-default", action="store_true",
                   help="run plan and train without --steady-memory (glibc's own mmap threshold, which moves)")


def apply_glibc_default(args: argparse.Namespace) -> None:
    if args.glibc_default:
        STEADY.clear()


def with_steady(argv: list[str]) -> list[str]:
    """`argv` (a scaletrain command and its flags) with --steady-memory after the command, as chosen."""
    return [*argv[:1], *STEADY, *argv[1:]]
