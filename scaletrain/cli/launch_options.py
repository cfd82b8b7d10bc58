"""The launch options shared by `scaletrain launch` and `scaletrain train` (torchrun's names
where torchrun has one), and what both do with them: plan, print or write, check, run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional

from ..defaults import CONNECT_TIMEOUT_S, MASTER_PORT
from ..errors import UsageError
from ..launch.plan import Target
from ..launch.request import LAUNCHERS, LaunchRequest, parse_hosts, read_hostfile
from .parsing import positive_float, positive_int

# Option strings that take a value, and flags that do not: used to take them out of a
# command line that is handed on to the ranks (`scaletrain train` re-runs its own argv).
_VALUE_OPTIONS: set[str] = set()
_FLAG_OPTIONS: set[str] = set()


def _add(group, *flags: str, takes_value: bool = True, **kwargs) -> None:
    group.add_argument(*flags, **kwargs)
    (_VALUE_OPTIONS if takes_value else _FLAG_OPTIONS).update(flags)


def add_launch_arguments(p: argparse.ArgumentParser, nproc_default: str = "1") -> None:
    g = p.add_argument_group("launching (torchrun's option names)")
    _add(g, "--launcher", choices=LAUNCHERS, default="auto",
         help="how processes start: spawn (this machine, from Python), torchrun, mpirun (Open MPI), srun (Slurm); "
              "auto: srun inside a Slurm allocation, mpirun with --hostfile/--hosts, torchrun for --nnodes > 1, "
              "else spawn")
    _add(g, "--nproc-per-node", type=positive_int, default=None, metavar="N",
         help=f"processes on each node (default: {nproc_default})")
    _add(g, "--nnodes", type=positive_int, default=None, metavar="M", help="number of nodes (default 1)")
    _add(g, "--node-rank", type=int, default=None, metavar="R",
         help="this node's number, 0..M-1 (torchrun without --rdzv-endpoint; default 0, or SLURM_NODEID "
              "inside an srun task)")
    _add(g, "--master-addr", metavar="HOST",
         help="node 0's address, reachable from every node (default 127.0.0.1; mpirun: the first host)")
    _add(g, "--master-port", type=positive_int, metavar="PORT",
         help=f"node 0's rendezvous port (default: a free port on one node, {MASTER_PORT} on several)")
    _add(g, "--rdzv-endpoint", metavar="HOST:PORT",
         help="torchrun's c10d rendezvous instead of --master-addr/--node-rank: nodes number themselves")
    _add(g, "--rdzv-id", default="scaletrain", metavar="ID", help="rendezvous id, the same on every node")
    _add(g, "--hostfile", metavar="FILE", help="mpirun: Open MPI hostfile, lines 'host slots=N'")
    _add(g, "--hosts", metavar="A:N,B:N", help="mpirun: hosts and slots, like Open MPI's --host")
    _add(g, "--sbatch", type=Path, metavar="FILE", help="srun: write a ready Slurm batch script to FILE and exit")
    _add(g, "--connect-timeout", type=positive_float, default=CONNECT_TIMEOUT_S, metavar="SECONDS",
         help=f"how long a node waits for node 0's rendezvous to open (default {CONNECT_TIMEOUT_S:g})")
    _add(g, "--dry-run", action="store_true", takes_value=False,
         help="print the exact command each node runs and its environment, then exit")


def launch_requested(args: argparse.Namespace) -> bool:
    """Whether the options ask for anything beyond running here, in this process."""
    return args.launcher not in ("auto", "spawn") or (args.nnodes or 1) > 1 or bool(
        args.hostfile or args.hosts or args.rdzv_endpoint or args.dry_run or args.sbatch)


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


def launch_request(args: argparse.Namespace, target: Target, nproc: int = 1) -> LaunchRequest:
    """The request the options describe (`nproc`: the command's default processes per node)."""
    hosts, hostfile = (), None
    if args.hostfile and args.hosts:
        raise UsageError("give either --hostfile or --hosts, not both")
    if args.hostfile:
        hosts, hostfile = tuple(read_hostfile(args.hostfile)), args.hostfile
        if not hosts:
            raise UsageError(f"--hostfile {args.hostfile} lists no hosts; write one line per host: 'host slots=N'")
    elif args.hosts:
        hosts = tuple(parse_hosts(args.hosts))
    launcher = "srun" if args.sbatch and args.launcher == "auto" else args.launcher
    if args.sbatch and launcher != "srun":
        raise UsageError(f"--sbatch writes a Slurm batch script; use it with --launcher srun, not {launcher}")
    return LaunchRequest(target, launcher=launcher, nproc_per_node=args.nproc_per_node, default_nproc=nproc,
                         nnodes=args.nnodes, node_rank=args.node_rank, master_addr=args.master_addr,
                         master_port=args.master_port, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
                         hosts=hosts, hostfile=hostfile, sbatch=args.sbatch,
                         connect_timeout=args.connect_timeout).with_host_facts()


def plan_and_run(request: LaunchRequest, dry_run: bool, prepare: Optional[Callable[[], object]] = None) -> int:
    """Plan; then print it (--dry-run), write the batch script (--sbatch), or check and run it
    (`prepare` runs once every check has passed, so a failed check leaves nothing behind)."""
    from ..launch import preflight
    from ..launch.executor import execute
    from ..launch.planner import plan_for

    request, plan = plan_for(request)
    if dry_run:
        print(plan.render())
        return 0
    if request.sbatch:
        _write_batch(request.sbatch, plan.batch_script or "")
        print(f"scaletrain: wrote {request.sbatch}; submit it with: sbatch {request.sbatch}")
        return 0
    preflight.check(request)
    if prepare:
        prepare()
    sys.stdout.flush()
    return execute(plan)


def _write_batch(path: Path, text: str) -> None:
    if path.exists():
        raise UsageError(f"--sbatch {path} exists already; choose a new file name")
    try:
        path.write_text(text)
        path.chmod(0o755)
    except OSError as exc:
        raise UsageError(f"--sbatch {path} cannot be written ({exc.strerror}); choose another path") from None
