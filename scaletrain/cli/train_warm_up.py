"""How many warm interpreters `scaletrain train` starts before it reads its flags properly
(see launchers/warm.py): reading them needs torch, which is what the interpreters import
meanwhile. So this looks at the command line as text, cheaply, and answers only when the
run will plainly be N > 1 local ranks of the spawn launcher; 0 whenever in doubt (a guess
that is wrong costs nothing but the unused interpreters, ended at once)."""

from __future__ import annotations

import os
from typing import Optional

from ..process.cores import cpu_cores

#: Flags after which the run is not N local spawn ranks, or not decided by the command
#: line alone (a --config file may say anything).
_NOT_SPAWN = frozenset({"--dry-run", "--sbatch", "-h", "--help", "--hosts", "--hostfile", "--rdzv-endpoint",
                        "--rdzv_endpoint", "--config"})
#: Strategies that run as one process.
_ONE_PROCESS = frozenset({"single", "dp", "mp"})


def _value(argv: list[str], *flags: str) -> Optional[str]:
    found = None
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        if name in flags:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def ranks_to_warm(argv: list[str], environ=os.environ) -> int:
    if any(token.partition("=")[0] in _NOT_SPAWN for token in argv):
        return 0
    if _value(argv, "--launcher") not in (None, "auto", "spawn") or _value(argv, "--nnodes") not in (None, "1"):
        return 0
    if _value(argv, "--strategy") in _ONE_PROCESS or environ.get("SLURM_JOB_ID"):
        return 0
    given = _value(argv, "--nproc-per-node", "--nproc_per_node")
    if given is None and (os.path.exists("/dev/nvidia0") or environ.get("CUDA_VISIBLE_DEVICES")):
        return 0  # one rank per GPU: how many, only torch can tell
    try:
        count = int(given) if given is not None else cpu_cores()
    except ValueError:
        return 0
    return count if count > 1 else 0


#: Flags after which the command plainly does not train in its own process.
_ELSEWHERE = frozenset({"--dry-run", "--sbatch", "-h", "--help", "--hosts", "--hostfile", "--rdzv-endpoint",
                        "--rdzv_endpoint", "--max-restarts", "--max_restarts"})


def trains_here(argv: list[str], environ=os.environ) -> bool:
    """Whether `scaletrain train` may train in its own process (one process, no launcher):
    True unless the command line plainly says otherwise (a guess that is wrong costs the
    command a restart with its allocator: see allocator_choice.py)."""
    if any(token.partition("=")[0] in _ELSEWHERE for token in argv):
        return False
    if _value(argv, "--launcher") not in (None, "auto", "spawn") or _value(argv, "--nnodes") not in (None, "1"):
        return False
    return ranks_to_warm(argv, environ) == 0
