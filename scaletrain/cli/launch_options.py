"""The launch options shared by `scaletrain launch` and `scaletrain train` (torchrun's names
where torchrun has one, each also in torchrun's underscore spelling: `--nproc_per_node`),
and the LaunchRequest they describe."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from ..defaults import CONNECT_TIMEOUT_S, MASTER_PORT
from ..errors import UsageError
from ..fault.durations import RULE, format_duration
from ..launchers.plan import Target
from ..launchers.request import LAUNCHERS, LaunchRequest, SlurmResources, parse_hosts, read_hostfile
from .parsing import duration, non_negative_int, port, positive_int, with_underscores

# Option strings that take a value, and flags that do not: used to take them out of a
# command line that is handed on to the ranks (`scaletrain train` re-runs its own argv).
_VALUE_OPTIONS: set[str] = set()
_FLAG_OPTIONS: set[str] = set()


def _add(group, *flags: str, takes_value: bool = True, **kwargs) -> None:
    spelled = with_underscores(*flags)
    group.add_argument(*spelled, **kwargs)
    (_VALUE_OPTIONS if takes_value else _FLAG_OPTIONS).update(spelled)


def launcher_args(text: str) -> tuple:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot split {text!r} like a shell would ({exc})") from None


launcher_args.to_text = shlex.join  # how a configuration file records it (read back by launcher_args)


def glue_launcher_args(argv: list[str]) -> list[str]:
    """`--launcher-args "--exclusive"` as `--launcher-args=--exclusive`: argparse would take a
    value that starts with a dash and has no space for an option of its own."""
    out = list(argv)
    for i, token in enumerate(out[:-1]):
        if token in ("--launcher-args", "--launcher_args"):
            out[i:i + 2] = [f"{token}={out[i + 1]}"]
            break
    return out


def add_launch_arguments(p: argparse.ArgumentParser, nproc_default: str = "1") -> None:
    g = p.add_argument_group("launching (torchrun's option names; --nproc_per_node spellings work too)")
    _add(g, "--launcher", choices=LAUNCHERS, default="auto",
         help="how processes start: spawn (this machine, from Python), torchrun, mpirun (Open MPI), srun (Slurm); "
              "auto: srun inside a Slurm allocation, mpirun with --hostfile/--hosts, torchrun for --nnodes > 1, "
              "else spawn")
    _add(g, "--nproc-per-node", type=positive_int, default=None, metavar="N",
         help=f"processes on each node (default: {nproc_default}; PET_NPROC_PER_NODE if set, as torchrun)")
    _add(g, "--nnodes", type=positive_int, default=None, metavar="M",
         help="number of nodes (default 1; in a Kubernetes pod of a PyTorchJob: WORLD_SIZE pods)")
    _add(g, "--node-rank", type=non_negative_int, default=None, metavar="R",
         help="this node's number, 0..M-1 (torchrun without --rdzv-endpoint; default 0, SLURM_NODEID inside an srun "
              "task, RANK in a one-process-per-pod job)")
    _add(g, "--master-addr", metavar="HOST",
         help="node 0's address, reachable from every node (default 127.0.0.1; mpirun: the first host)")
    _add(g, "--master-port", type=port, metavar="PORT",
         help=f"node 0's rendezvous port (default: a free port on one node, {MASTER_PORT} on several)")
    _add(g, "--rdzv-endpoint", metavar="HOST:PORT",
         help="torchrun's c10d rendezvous instead of --master-addr/--node-rank: nodes number themselves")
    _add(g, "--rdzv-id", default="scaletrain", metavar="ID", help="rendezvous id, the same on every node")
    _add(g, "--hostfile", metavar="FILE", help="mpirun: Open MPI hostfile, lines 'host slots=N'")
    _add(g, "--hosts", metavar="A:N,B:N", help="mpirun: hosts and slots, like Open MPI's --host")
    _add(g, "--connect-timeout", type=duration, default=CONNECT_TIMEOUT_S, metavar="DURATION",
         help=f"how long a node waits for node 0's rendezvous to open; {RULE} "
              f"(default {format_duration(CONNECT_TIMEOUT_S)})")
    _add(g, "--launcher-args", type=launcher_args, default=(), metavar='"ARGS"',
         help='extra arguments for torchrun, mpirun or srun, as one quoted string, e.g. --launcher-args '
              '"--mca btl_tcp_if_include eth0"; shown by --dry-run')
    _add(g, "--dry-run", action="store_true", takes_value=False,
         help="print the exact command each node runs and its environment (and the batch script for srun), then "
              "exit; never trains, whoever started the process")
    s = p.add_argument_group("Slurm batch script (--launcher srun)")
    _add(s, "--sbatch", type=Path, metavar="FILE", help="write a ready Slurm batch script to FILE and exit")
    _add(s, "--gpus-per-node", type=non_negative_int, metavar="G",
         help="GPUs to ask for on each node (default: one per process when the job's --device is cuda; 0: none)")
    _add(s, "--cpus-per-task", type=positive_int, metavar="C", help="CPU cores to ask for per process")
    _add(s, "--time", type=duration, metavar="DURATION", help=f"the job's time limit; {RULE}")
    _add(s, "--partition", metavar="NAME", help="the Slurm partition to submit to")


def launch_requested(args: argparse.Namespace) -> bool:
    """Whether the options ask for anything beyond running here, in this process."""
    return args.launcher not in ("auto", "spawn") or (args.nnodes or 1) > 1 or bool(
        args.hostfile or args.hosts or args.rdzv_endpoint or args.dry_run or args.sbatch)


def runs_elsewhere(args: argparse.Namespace) -> bool:
    """Whether the job is only written down for other machines (a Slurm batch script or its
    dry run, outside an allocation): this host's devices say nothing about theirs."""
    return (args.launcher == "srun" or bool(args.sbatch)) and (args.sbatch or args.dry_run) and \
        not os.environ.get("SLURM_JOB_ID")


def strip_launch_args(argv: list[str], also: tuple = ()) -> list[str]:
    """argv without the launch options (the ranks must not launch again) nor the value
    options named in `also`."""
    if not _VALUE_OPTIONS:  # the option names are recorded when the options are defined
        add_launch_arguments(argparse.ArgumentParser())
    values = _VALUE_OPTIONS | set(also)
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if token in values:
            skip = True
        elif token in _FLAG_OPTIONS or (name in values and "=" in token):
            continue
        else:
            out.append(token)
    return out


def launch_request(args: argparse.Namespace, target: Target, nproc: int = 1, device=None) -> LaunchRequest:
    """The request the options describe (`nproc`: the command's default processes per node;
    `device`: the job's device when the command knows it)."""
    hosts, hostfile = (), None
    if args.hostfile and args.hosts:
        raise UsageError("give either --hostfile or --hosts, not both")
    if args.hostfile:
        hosts, hostfile = tuple(read_hostfile(args.hostfile)), args.hostfile
        if not hosts:
            raise UsageError(f"--hostfile {args.hostfile} lists no hosts; write one line per host: 'host slots=N'")
    elif args.hosts:
        hosts = tuple(parse_hosts(args.hosts))
    slurm = SlurmResources(args.gpus_per_node, args.cpus_per_task, args.time, args.partition)
    launcher = "srun" if (args.sbatch or slurm != SlurmResources()) and args.launcher == "auto" else args.launcher
    if (args.sbatch or slurm != SlurmResources()) and launcher != "srun":
        raise UsageError(f"--sbatch, --gpus-per-node, --cpus-per-task, --time and --partition are for Slurm; use them "
                         f"with --launcher srun, not {launcher}")
    return LaunchRequest(target, launcher=launcher, nproc_per_node=args.nproc_per_node, default_nproc=nproc,
                         nnodes=args.nnodes, node_rank=args.node_rank, master_addr=args.master_addr,
                         master_port=args.master_port, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
                         hosts=hosts, hostfile=hostfile, sbatch=args.sbatch, slurm=slurm, device=device,
                         connect_timeout=args.connect_timeout, timeout=args.timeout,
                         launcher_args=args.launcher_args).with_host_facts()
