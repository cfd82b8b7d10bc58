"""The allocator, chosen before anything starts (see scaletrain/memory/allocator.py).

A library preloaded with LD_PRELOAD takes effect when a process starts, so the choice must be
in the environment before the first process this command starts — the warm interpreters of
`scaletrain train` start before its flags are properly read (launchers/warm.py). So the
command line is read here as text, cheaply (`--allocator`, `--steady-memory`, and the same keys
of a `--config` file), and the environment set; each command then resolves its flags properly
and sets it again (cli/perf_options.py), which is the decision that counts — and a mistake in
`--allocator` is reported there, in one line.

`scaletrain train` may train in this very process (one process, no launcher): then this
process must run the allocator itself, so it starts itself again with it (`os.execve`, the
same process, a few tens of milliseconds, before torch is imported). When the command will
plainly start ranks instead, it does not.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from ..memory import allocator

#: Set in the environment of a command started again with its allocator: it is not started again.
RESTARTED_VAR = "SCALETRAIN_ALLOCATOR_RESTARTED"

#: Whether the command runs as a function (`scaletrain.cli.main(argv)` called by other code):
#: its one process is its caller's, which cannot be started again, and trains with the
#: allocator it runs; the processes it starts still get the one asked for.
as_a_function = False

#: Commands whose processes train: their allocator is chosen.
COMMANDS = frozenset({"train", "launch", "bench", "plan"})


def _flag(argv: list[str], name: str) -> Optional[str]:
    found = None
    for i, token in enumerate(argv):
        key, eq, value = token.partition("=")
        if key == name:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def _config_keys(argv: list[str]) -> dict:
    """`allocator` and `steady_memory` of a --config file (nothing when it cannot be read: the
    command says why, later)."""
    path = _flag(argv, "--config")
    if not path:
        return {}
    try:
        from .config_file import settings

        data = settings(path)
    except Exception:  # noqa: BLE001 - reported by the command itself
        return {}
    return {k: data[k] for k in ("allocator", "steady_memory") if k in data}


def asked(argv: list[str]) -> tuple[str, bool]:
    """(allocator, steady memory) as the command line says, flags over the --config file."""
    keys = _config_keys(argv)
    name = _flag(argv, "--allocator") or keys.get("allocator") or "auto"
    steady = "--steady-memory" in argv or keys.get("steady_memory") is True
    return str(name), steady


def prepare(command: str, argv: list[str], trains_here: bool, own_process: bool = True) -> None:
    """Sets this process's environment for the allocator the command line asks for; for a
    command that will train in this process, starts it again with that allocator — where the
    process is the command's own (`own_process`), not a caller's that called it as a function."""
    global as_a_function
    as_a_function = not own_process
    restarted = os.environ.pop(RESTARTED_VAR, None)  # (not passed on to the processes it starts)
    if command not in COMMANDS:
        return
    try:
        name = allocator.resolve(*asked(argv))
    except Exception:  # noqa: BLE001 - a mistake in the flags: the command reports it
        return
    allocator.apply(name, why=allocator.reason(*asked(argv), name))
    if command == "train" and trains_here and own_process and name in allocator.LIBRARIES and allocator.running() != name \
            and not restarted:
        os.environ[RESTARTED_VAR] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execve(sys.executable, sys.orig_argv, os.environ)
        except OSError:  # the interpreter cannot be started again: train with glibc's, as before
            os.environ.pop(RESTARTED_VAR, None)
