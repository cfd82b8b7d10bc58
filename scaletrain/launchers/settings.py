"""The launch settings a command line gives (`scaletrain launch` and `scaletrain train` alike),
declared once: their flags (torchrun's names, each also in torchrun's underscore spelling:
`--nproc_per_node`), their help and their configuration-file keys are generated from these
fields (scaletrain.foundation.options), and `request` turns them into the LaunchRequest they describe."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..foundation.defaults import CONNECT_TIMEOUT_S, HANG_TIMEOUT_S, MASTER_PORT
from ..foundation.durations import RULE, format_duration
from ..foundation.errors import UsageError
from ..foundation.options import option
from ..foundation.text_values import duration, non_negative_int, port, positive_int, shell_words
from ..foundation.text_values import AUTO
from .launch_plan import Target
from .request import LAUNCHERS, LaunchRequest, SlurmResources, parse_hosts, read_hostfile

LAUNCHING = "launching (torchrun's option names; --nproc_per_node spellings work too)"
SLURM = "Slurm batch script (--launcher srun)"


def _launch(default, help: str, group: str = LAUNCHING, **kwargs):
    return option(default, help, group=group, underscores=True, **kwargs)


@dataclass(frozen=True)
class LaunchSettings:
    launcher: str = _launch(
        "auto", "how processes start: spawn (this machine, from Python), torchrun, mpirun (Open MPI), srun (Slurm); "
                "auto: srun inside a Slurm allocation, mpirun with --hostfile/--hosts, torchrun for --nnodes > 1, "
                "else spawn", choices=LAUNCHERS)
    nproc_per_node: Optional[int] = _launch(
        None, "processes on each node (default: {nproc_default}; PET_NPROC_PER_NODE if set, as torchrun)",
        metavar="N", parse=positive_int)
    nnodes: Optional[int] = _launch(
        None, "number of nodes (default 1; in a Kubernetes pod of a PyTorchJob: WORLD_SIZE pods)", metavar="M",
        parse=positive_int)
    node_rank: Optional[int] = _launch(
        None, "this node's number, 0..M-1 (torchrun without --rdzv-endpoint; default 0, SLURM_NODEID inside an srun "
              "task, RANK in a one-process-per-pod job)", metavar="R", parse=non_negative_int)
    master_addr: Optional[str] = _launch(
        None, "node 0's address, reachable from every node (default 127.0.0.1; mpirun: the first host)",
        metavar="HOST")
    master_port: Optional[int] = _launch(
        None, f"node 0's rendezvous port (default: a free port on one node, {MASTER_PORT} on several)",
        metavar="PORT", parse=port)
    rdzv_endpoint: Optional[str] = _launch(
        None, "torchrun's c10d rendezvous instead of --master-addr/--node-rank: nodes number themselves",
        metavar="HOST:PORT")
    rdzv_id: str = _launch("scaletrain", "rendezvous id, the same on every node", metavar="ID")
    hostfile: Optional[str] = _launch(None, "mpirun: Open MPI hostfile, lines 'host slots=N'", metavar="FILE")
    hosts: Optional[str] = _launch(None, "mpirun: hosts and slots, like Open MPI's --host", metavar="A:N,B:N")
    connect_timeout: float = _launch(
        CONNECT_TIMEOUT_S, f"how long a node waits for node 0's rendezvous to open; {RULE} "
                           f"(default {format_duration(CONNECT_TIMEOUT_S)})", metavar="DURATION", parse=duration)
    launcher_args: tuple = _launch(
        (), 'extra arguments for torchrun, mpirun or srun, as one quoted string, e.g. --launcher-args '
            '"--mca btl_tcp_if_include eth0"; shown by --dry-run', metavar='"ARGS"', parse=shell_words)
    dry_run: bool = _launch(
        False, "print the exact command each node runs and its environment (and the batch script for srun), then "
               "exit; never trains, whoever started the process")
    sbatch: Optional[Path] = _launch(None, "write a ready Slurm batch script to FILE and exit", group=SLURM,
                                     metavar="FILE", parse=Path)
    gpus_per_node: Optional[int] = _launch(
        None, "GPUs to ask for on each node (default: one per process when the job's --device is cuda; 0: none)",
        group=SLURM, metavar="G", parse=non_negative_int)
    cpus_per_task: Optional[int] = _launch(None, "CPU cores to ask for per process", group=SLURM, metavar="C",
                                           parse=positive_int)
    time: Optional[float] = _launch(None, f"the job's time limit; {RULE}", group=SLURM, metavar="DURATION",
                                    parse=duration)
    partition: Optional[str] = _launch(None, "the Slurm partition to submit to", group=SLURM, metavar="NAME")

    @property
    def requested(self) -> bool:
        """Whether these ask for anything beyond running here, in this process."""
        return self.launcher not in (AUTO, "spawn") or (self.nnodes or 1) > 1 or bool(
            self.hostfile or self.hosts or self.rdzv_endpoint or self.dry_run or self.sbatch)

    @property
    def elsewhere(self) -> bool:
        """Whether the job is only written down for other machines (a Slurm batch script or its
        dry run, outside an allocation): this host's devices say nothing about theirs."""
        return (self.launcher == "srun" or bool(self.sbatch)) and bool(self.sbatch or self.dry_run) and \
            not os.environ.get("SLURM_JOB_ID")

    def request(self, target: Target, nproc: int = 1, device=None, timeout: float = HANG_TIMEOUT_S) -> LaunchRequest:
        """The request these describe (`nproc`: the command's default processes per node;
        `device`: the job's device when the command knows it; `timeout`: the ranks' hang bound)."""
        hosts, hostfile = (), None
        if self.hostfile and self.hosts:
            raise UsageError("give either --hostfile or --hosts, not both")
        if self.hostfile:
            hosts, hostfile = tuple(read_hostfile(self.hostfile)), self.hostfile
            if not hosts:
                raise UsageError(f"--hostfile {self.hostfile} lists no hosts; write one line per host: 'host slots=N'")
        elif self.hosts:
            hosts = tuple(parse_hosts(self.hosts))
        slurm = SlurmResources(self.gpus_per_node, self.cpus_per_task, self.time, self.partition)
        launcher = "srun" if (self.sbatch or slurm != SlurmResources()) and self.launcher == AUTO else self.launcher
        if (self.sbatch or slurm != SlurmResources()) and launcher != "srun":
            raise UsageError(f"--sbatch, --gpus-per-node, --cpus-per-task, --time and --partition are for Slurm; use "
                             f"them with --launcher srun, not {launcher}")
        return LaunchRequest(target, launcher=launcher, nproc_per_node=self.nproc_per_node, default_nproc=nproc,
                             nnodes=self.nnodes, node_rank=self.node_rank, master_addr=self.master_addr,
                             master_port=self.master_port, rdzv_endpoint=self.rdzv_endpoint, rdzv_id=self.rdzv_id,
                             hosts=hosts, hostfile=hostfile, sbatch=self.sbatch, slurm=slurm, device=device,
                             connect_timeout=self.connect_timeout, timeout=timeout,
                             launcher_args=self.launcher_args).with_host_facts()
