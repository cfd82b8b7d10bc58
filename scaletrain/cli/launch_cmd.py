"""`scaletrain launch [options] script.py [args]`: run a user's script — written with
scaletrain's API or with plain torch.distributed — on N processes per node × M nodes, with
spawn, torchrun, Open MPI or Slurm.

    scaletrain launch --nproc-per-node 2 examples/plain_ddp.py
    scaletrain launch --launcher mpirun --hostfile hosts examples/plain_ddp.py --steps 20
    scaletrain launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 train.py   # on each node
    scaletrain launch --launcher srun --sbatch job.sh train.py                    # then: sbatch job.sh
"""

from __future__ import annotations

import argparse
import os

from ..foundation.defaults import HANG_TIMEOUT_S, MAX_RESTARTS
from ..foundation.durations import RULE, format_duration
from ..foundation.errors import UsageError
from .launch_options import add_launch_arguments, launch_settings
from .parsing import duration, non_negative_int, with_underscores
from .perf_options import add_process_memory_arguments, apply_process_memory

HELP = ("run your script or module (scaletrain API or plain torch.distributed) on N processes per node × M nodes, "
        "with spawn, torchrun, Open MPI or Slurm")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_launch_arguments(p)
    g = p.add_argument_group("start-up and failures")
    g.add_argument(*with_underscores("--timeout"), type=duration, default=HANG_TIMEOUT_S, metavar="DURATION",
                   help=f"start-up bound: a rank left waiting this long in init_process_group names the ranks that "
                        f"never joined, and the job ends; {RULE} (default {format_duration(HANG_TIMEOUT_S)}, as "
                        "`train --timeout`)")
    g.add_argument(*with_underscores("--max-restarts"), type=non_negative_int, default=MAX_RESTARTS, metavar="K",
                   help="when the job fails, start it again up to K times (not after Ctrl-C, SIGTERM or a usage "
                        f"error; default {MAX_RESTARTS})")
    add_process_memory_arguments(g)
    p.add_argument("-m", "--module", action="store_true",
                   help="the program is a module, run like `python -m` (as with torchrun's -m)")
    p.add_argument("script", metavar="script.py", help="the program each rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")


def run(args: argparse.Namespace) -> int:
    from ..process.environment import detect
    from ..launchers import facade
    from ..launchers.launch_plan import Target
    from ..launchers.restart import run_with_restarts

    apply_process_memory(args)
    env = detect(os.environ)
    # A process that stands for a whole node (a Kubernetes pod, one srun task per node
    # starting torchrun) may start the node's ranks; a rank of a running job may not.
    node_agent = env.per_node or (env.launcher == "slurm" and args.launcher == "torchrun")
    if env.launched and not node_agent and not args.dry_run:
        raise UsageError(f"already running as rank {env.rank} of {env.world_size} under {env.launcher}; "
                         "run `scaletrain launch` from a shell, not from inside a launched job "
                         "(inside an srun task per node, use --launcher torchrun)")
    if args.module:
        target = Target(module=args.script, args=tuple(args.args))
    else:
        if os.path.isdir(args.script) and not os.path.isfile(os.path.join(args.script, "__main__.py")):
            raise UsageError(f"script {args.script} is a folder without __main__.py; give the path of a Python file "
                             "in it (or -m module)")
        if not os.path.exists(args.script):
            raise UsageError(f"script {args.script} does not exist; give the path of a Python file (or -m module)")
        target = Target(script=args.script, args=tuple(args.args))
    request = launch_settings(args).request(target, timeout=args.timeout)
    if args.dry_run or args.sbatch:
        return facade.run(request, dry_run=args.dry_run)
    return run_with_restarts(lambda attempt: facade.run(request), args.max_restarts)
