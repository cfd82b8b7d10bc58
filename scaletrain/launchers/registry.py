"""The launchers by name, and the choice `--launcher auto` makes. Adding a launcher means
adding its module and one line here."""

from __future__ import annotations

from ..foundation.text_values import AUTO
from . import mpirun, spawn, srun, torchrun
from .base import Launcher
from .request import LaunchRequest

LAUNCHERS: dict[str, Launcher] = {
    "spawn": spawn.LAUNCHER,
    "torchrun": torchrun.LAUNCHER,
    "mpirun": mpirun.LAUNCHER,
    "srun": srun.LAUNCHER,
}


def pick_launcher(req: LaunchRequest) -> str:
    """auto: Slurm inside an allocation; mpirun when hosts are listed; torchrun for several
    nodes; spawn for one machine."""
    if req.launcher != AUTO:
        return req.launcher
    if req.in_slurm_allocation:
        return "srun"
    if req.hosts:
        return "mpirun"
    if (req.nnodes or 1) > 1 or req.rdzv_endpoint:
        return "torchrun"
    return "spawn"


def launcher_for(req: LaunchRequest) -> Launcher:
    return LAUNCHERS[pick_launcher(req)]
