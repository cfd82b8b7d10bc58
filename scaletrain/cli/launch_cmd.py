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

from ..environment import detect
from ..errors import UsageError
from ..launch.plan import Target
from .launch_options import add_launch_arguments, launch_request, plan_and_run

NAME = "launch"
HELP = "run your script (scaletrain API or plain torch.distributed) on N processes per node × M nodes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_launch_arguments(p)
    p.add_argument("-m", "--module", action="store_true",
                   help="the program is a module, run like `python -m` (as with torchrun's -m)")
    p.add_argument("script", metavar="script.py", help="the program each rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")


def run(args: argparse.Namespace) -> int:
    env = detect(os.environ)
    # One exception: srun starting one `scaletrain launch --launcher torchrun` per node.
    if env.launched and not (env.launcher == "slurm" and args.launcher == "torchrun"):
        raise UsageError(f"already running as rank {env.rank} of {env.world_size} under {env.launcher}; "
                         "run `scaletrain launch` from a shell, not from inside a launched job "
                         "(inside an srun task per node, use --launcher torchrun)")
    if args.module:
        target = Target(module=args.script, args=tuple(args.args))
    else:
        if not os.path.isfile(args.script):
            raise UsageError(f"script {args.script} does not exist; give the path of a Python file (or -m module)")
        target = Target(script=args.script, args=tuple(args.args))
    return plan_and_run(launch_request(args, target), args.dry_run)
