"""A launch plan: what each node runs (argv lists and environment variables), built by a
launcher and run by its executor. Never a shell string: an argv list cannot be misquoted,
and `--dry-run` prints exactly what would run, so tests can assert it."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Optional

from ..foundation.durations import format_duration
from .parent_watch import LAUNCHER_VAR, this_process

# Every rank runs the user's program through this module: it fills in torch's env://
# variables from whatever launcher started it, names the network interface, bounds the
# start-up and the teardown, and records the rank's traceback where the launcher finds it.
RANK_RUNNER = "scaletrain.launchers.rank"
ERROR_DIR_VAR = "SCALETRAIN_ERROR_DIR"
#: "1" or "0": whether the launching command's stdout is a terminal. A rank's own stdout
#: says nothing about that: mpirun hands its ranks a pseudo-terminal even when its output
#: goes to a file, and a progress bar's control codes would end up there.
TERMINAL_VAR = "SCALETRAIN_STDOUT_IS_TERMINAL"


def execution_env(error_dir: str) -> dict[str, str]:
    """What every rank gets besides its plan's variables, when the plan runs: they describe
    this run of it, so `--dry-run` only names them."""
    return {ERROR_DIR_VAR: error_dir, LAUNCHER_VAR: this_process(), TERMINAL_VAR: "1" if stdout_is_terminal() else "0"}


def stdout_is_terminal() -> bool:
    """Whether this process's output reaches a terminal (see TERMINAL_VAR)."""
    given = os.environ.get(TERMINAL_VAR)
    if given in ("0", "1"):
        return given == "1"
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class Target:
    """The program each rank runs: a script, or a module (`-m`), and its arguments."""

    script: Optional[str] = None
    module: Optional[str] = None
    args: tuple = ()

    def program_args(self) -> list[str]:
        """`script args...` or `-m module args...`."""
        head = ["-m", self.module] if self.module else [self.script]
        return [*head, *self.args]

    def describe(self) -> str:
        return f"-m {self.module}" if self.module else str(self.script)


def runner_args(target: Target, join_timeout: float) -> list[str]:
    """The rank runner's arguments: its own options, then the program and its arguments."""
    return ["--join-timeout", f"{join_timeout:g}", *target.program_args()]


def rank_argv(target: Target, join_timeout: float, python: str = sys.executable) -> list[str]:
    return [python, "-m", RANK_RUNNER, *runner_args(target, join_timeout)]


@dataclass(frozen=True)
class Command:
    """One process the launcher starts, on `where`, with `env` added to the environment."""

    where: str
    argv: tuple
    env: dict = field(default_factory=dict)
    runs_here: bool = True  # False: shown for information (another node runs it)


@dataclass(frozen=True)
class Plan:
    launcher: str
    commands: tuple
    target: Target
    nnodes: int = 1
    nproc_per_node: int = 1
    node_rank: Optional[int] = None     # this node's number when known before the job starts
    join_timeout: float = 0.0
    notes: tuple = ()
    batch_script: Optional[str] = None  # Slurm: a ready sbatch script

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def ranks_here(self) -> str:
        """The global ranks this node runs, as torchrun numbers them (node-major)."""
        if self.node_rank is None:
            return "ranks given by the rendezvous"
        first = self.node_rank * self.nproc_per_node
        last = first + self.nproc_per_node - 1
        return f"ranks {first}–{last} of {self.world_size}" if last > first else f"rank {first} of {self.world_size}"

    def render(self) -> str:
        """The dry run: exact argv (shell-quoted, one command per block) and environment."""
        per_node = (f"{self.nproc_per_node} process(es) = {self.world_size} rank(s)" if self.nproc_per_node
                    else "the allocation's tasks per node")
        lines = [f"launcher: {self.launcher} — {self.nnodes} node(s) × {per_node} running {self.target.describe()}"]
        if self.launcher != "srun" and self.nnodes > 1:
            lines.append(f"this node: {'node ' + str(self.node_rank) if self.node_rank is not None else 'a node'}, "
                         f"{self.ranks_here()}")
        for command in self.commands:
            lines.append(f"{command.where}{'' if command.runs_here else ' (run it there yourself)'}:")
            for key, value in sorted(command.env.items()):
                lines.append(f"  env  {key}={shlex.quote(str(value))}")
            lines.append(f"  argv {shlex.join(command.argv)}")
        if any(c.runs_here for c in self.commands):
            lines.append(f"each rank also gets {ERROR_DIR_VAR}=<a new temporary folder> for its traceback, "
                         f"{LAUNCHER_VAR}=<this command's pid> (a rank stops when its launcher is gone) and "
                         f"{TERMINAL_VAR}=<whether this command's output is a terminal>")
        if self.join_timeout:
            lines.append(f"start-up: a rank that does not join within {format_duration(self.join_timeout)} "
                         "is named and the job ends (--timeout)")
        for note in self.notes:
            lines.append(f"note: {note}")
        if self.batch_script and not any(c.runs_here for c in self.commands):
            lines += ["batch script (sbatch):", *(f"  {line}" for line in self.batch_script.splitlines())]
        return "\n".join(lines)
