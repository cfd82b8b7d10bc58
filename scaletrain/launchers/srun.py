"""The Slurm launcher: inside an allocation, `srun` starts one task per rank; outside one,
a ready batch script (`--sbatch FILE`, shown by --dry-run) asks Slurm for the nodes, tasks,
GPUs, CPUs, time and partition and runs the same srun inside its allocation.

Processes per node come from the flag or from the allocation, never from the host that
writes the script (a login node has other cores and no GPUs)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Optional

from ..foundation.errors import UsageError
from ..process.netif import Choice
from .base import Job
from .launch_plan import Command, Plan, rank_argv
from .preflight import check_program
from .processes import run_command
from .request import LaunchRequest


def _allocation_counts(req: LaunchRequest) -> tuple[Optional[int], Optional[int]]:
    env = req.environ
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    tasks = env.get("SLURM_NTASKS")
    nnodes = int(nodes) if nodes and nodes.isdigit() else None
    per_node = int(tasks) // (nnodes or 1) if tasks and tasks.isdigit() else None
    return nnodes, per_node


def gpus_wanted(req: LaunchRequest) -> Optional[str]:
    """The GPU request: the flag, else one GPU per process when the job runs on CUDA."""
    if req.slurm.gpus_per_node is not None:
        return f"--gpus-per-node={req.slurm.gpus_per_node}" if req.slurm.gpus_per_node else None
    if req.device and req.device.startswith("cuda"):
        return f"--gpus-per-node={req.nproc_per_node}" if req.nproc_per_node else "--gpus-per-task=1"
    return None


def slurm_time(seconds: float) -> str:
    """Slurm's time format, rounded up to a whole minute: [D-]HH:MM:SS."""
    minutes = int(-(-seconds // 60))
    days, minutes = divmod(minutes, 24 * 60)
    text = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    return f"{days}-{text}" if days else text


def srun_argv(req: LaunchRequest) -> list[str]:
    argv = ["srun"]
    if req.nproc_per_node:
        n, m = req.nproc_per_node, req.nnodes
        argv += ["--nodes", str(m), "--ntasks-per-node", str(n), "--ntasks", str(n * m)]
    if req.slurm.cpus_per_task:
        argv.append(f"--cpus-per-task={req.slurm.cpus_per_task}")  # srun does not inherit sbatch's
    # --kill-on-bad-exit: one failing task ends the step instead of leaving the rest waiting.
    return [*argv, "--kill-on-bad-exit=1", *req.launcher_args, *rank_argv(req.target, req.timeout, req.python)]


def batch_script(req: LaunchRequest) -> str:
    """A ready sbatch script that runs the same srun inside its allocation."""
    resources = [f"--nodes={req.nnodes}"]
    if req.nproc_per_node:
        resources.append(f"--ntasks-per-node={req.nproc_per_node}")
    resources += filter(None, [
        gpus_wanted(req),
        f"--cpus-per-task={req.slurm.cpus_per_task}" if req.slurm.cpus_per_task else None,
        f"--time={slurm_time(req.slurm.time_s)}" if req.slurm.time_s else None,
        f"--partition={req.slurm.partition}" if req.slurm.partition else None,
    ])
    env_lines = [f"export {k}={shlex.quote(str(v))}" for k, v in _master_env(req).items()]
    tasks_note = ([] if req.nproc_per_node else
                  ["# Tasks per node: from the allocation (e.g. sbatch --ntasks-per-node=4 <this file>)."])
    return "\n".join([
        "#!/bin/bash",
        "# Written by `scaletrain launch --sbatch`; submit it with: sbatch <this file>",
        "#SBATCH --job-name=scaletrain",
        *(f"#SBATCH {line}" for line in resources),
        "#SBATCH --output=scaletrain-%j.out",
        *tasks_note,
        "set -euo pipefail",
        f"cd {shlex.quote(req.cwd)}",
        *env_lines,
        "# Each task finds its rank in SLURM_PROCID; the master is the first host of the job.",
        shlex.join(srun_argv(req)),
        "",
    ])


def _master_env(req: LaunchRequest) -> dict:
    env = {}
    if req.master_addr:
        env["MASTER_ADDR"] = req.master_addr
    if req.master_port:
        env["MASTER_PORT"] = str(req.master_port)
    return env


class SrunLauncher:
    name = "srun"
    chooses_network = False  # each task chooses on its own node, in the rank runner

    def resolve(self, req: LaunchRequest) -> LaunchRequest:
        if req.hosts:
            raise UsageError("--hostfile/--hosts are for --launcher mpirun; under Slurm the allocation names the hosts")
        nodes, per_node = _allocation_counts(req) if req.in_slurm_allocation else (None, None)
        nproc = req.nproc_per_node or per_node
        if nproc is None and req.slurm.gpus_per_node:
            nproc = req.slurm.gpus_per_node  # one process per GPU
        if nproc is None and req.in_slurm_allocation:
            nproc = req.default_nproc
        return replace(req, launcher=self.name, nnodes=req.nnodes or nodes or 1, nproc_per_node=nproc, node_rank=None)

    def plan(self, req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
        inside = req.in_slurm_allocation
        where = "this allocation" if inside else "inside an allocation (salloc/sbatch)"
        command = Command(where, tuple(srun_argv(req)), _master_env(req), runs_here=inside)
        notes = () if inside else ("not inside a Slurm allocation: submit the batch script below "
                                   "(write it with --sbatch FILE), or run this inside salloc",)
        return Plan(self.name, (command,), req.target, req.nnodes, req.nproc_per_node or 0, notes=notes,
                    join_timeout=req.timeout, batch_script=batch_script(req))

    def preflight(self, req: LaunchRequest) -> None:
        check_program(self.name, req.environ)
        if not req.in_slurm_allocation:
            raise UsageError("not inside a Slurm allocation (no SLURM_JOB_ID): run inside salloc or sbatch, "
                             "or write a batch script with --sbatch FILE (or look first with --dry-run)")

    def execute(self, plan: Plan, job: Job) -> int:
        (command,) = plan.commands
        return run_command(command, job.error_dir, job.interrupts)


LAUNCHER = SrunLauncher()
