"""A launch plan: what each node runs (argv lists and environment variables), built by a
launcher and run by an executor. Never a shell string: an argv list cannot be misquoted,
and `--dry-run` prints exactly what would run, so tests can assert it."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Optional

# Every rank runs the user's program through this module: it fills in torch's env://
# variables from whatever launcher started it, names the network interface, and records
# the rank's traceback where the launcher can find it.
RANK_RUNNER = "scaletrain.launch.rank"
ERROR_DIR_VAR = "SCALETRAIN_ERROR_DIR"


@dataclass(frozen=True)
class Target:
    """The program each rank runs: a script, or a module (`-m`), and its arguments."""

    script: Optional[str] = None
    module: Optional[str] = None
    args: tuple = ()

    def runner_args(self) -> list[str]:
        """The rank runner's arguments: `script args...` or `-m module args...`."""
        head = ["-m", self.module] if self.module else [self.script]
        return [*head, *self.args]

    def rank_argv(self, python: str = sys.executable) -> list[str]:
        return [python, "-m", RANK_RUNNER, *self.runner_args()]

    def describe(self) -> str:
        return f"-m {self.module}" if self.module else str(self.script)


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
    notes: tuple = ()
    batch_script: Optional[str] = None  # Slurm: a ready sbatch script
    in_process: bool = False            # spawn: ranks are torch.multiprocessing children

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def render(self) -> str:
        """The dry run: exact argv (shell-quoted, one command per block) and environment."""
        lines = [f"launcher: {self.launcher} — {self.nnodes} node(s) × {self.nproc_per_node} process(es) "
                 f"= {self.world_size} rank(s) running {self.target.describe()}"]
        for command in self.commands:
            lines.append(f"{command.where}{'' if command.runs_here else ' (run it there yourself)'}:")
            for key, value in sorted(command.env.items()):
                lines.append(f"  env  {key}={shlex.quote(str(value))}")
            lines.append(f"  argv {shlex.join(command.argv)}")
        if not self.in_process and any(c.runs_here for c in self.commands):
            lines.append(f"each rank also gets {ERROR_DIR_VAR}=<a new temporary folder> for its traceback")
        for note in self.notes:
            lines.append(f"note: {note}")
        if self.batch_script and not any(c.runs_here for c in self.commands):
            lines += ["batch script (sbatch):", *(f"  {line}" for line in self.batch_script.splitlines())]
        return "\n".join(lines)
