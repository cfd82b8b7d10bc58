"""`scaletrain train` flags for speed that are not a strategy's (core pinning), and for memory
(meta-device initialisation; the allocator and steady memory, shared with bench, plan and launch).

(Gradient compression and DDP's bucket size are options of the ddp strategy: their flags
are generated with the other strategy options, see strategy_options.py.)
"""

from __future__ import annotations

import argparse
import os

from ..steady_memory import STEADY_MEMORY_VAR
from ..train.config import TrainConfig


def add_perf_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speed")
    g.add_argument("--no-pin-cores", dest="pin_cores", action="store_false",
                   help="do not bind each process to its own CPU cores (default: bind, when this machine's "
                        "cores can be shared out and no launcher bound them already)")


def add_memory_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory")
    g.add_argument("--meta-init", choices=("auto", "always", "never"), default="auto",
                   help="build the model on the meta device (no memory) and give each process only its share: "
                        "always, never, or auto (default: where no process holds the whole model, such as fsdp, "
                        "tp and pipeline, and the model's modules can initialise themselves: reset_parameters or a "
                        "Hugging Face model); the weights are those of an ordinary build from the same seed — where "
                        "replaying the modules' initialisation would not give them (a buffer or an init of the "
                        "constructor's own), the model is built whole, with a line saying why")
    add_process_memory_arguments(g)


def add_process_memory_arguments(p) -> None:
    """--allocator and --steady-memory, for every command that starts training processes."""
    from ..allocator import BEST, NAMES

    p.add_argument("--allocator", choices=NAMES, default="auto",
                   help=f"the CPU memory allocator of every process this command starts: auto (default: {BEST} where "
                        f"installed, else glibc's; glibc's with --steady-memory), tcmalloc, jemalloc or glibc. "
                        f"{BEST} holds less memory and runs faster than glibc's on every workload measured "
                        f"(docs/memory.md); `scaletrain doctor` says how to install it")
    p.add_argument("--steady-memory", action="store_true",
                   help="on a CPU, give freed tensors of 2 MB and more back to the system at once (glibc's mmap "
                        "threshold fixed), so that each process's resident memory is what it holds and what "
                        "`scaletrain plan` predicts, run after run; costs some speed (fresh pages for large "
                        "tensors). Give it to plan, bench and train alike when memory is what limits you")


def apply_process_memory(args: argparse.Namespace) -> str:
    """Every process this command starts inherits the choices through its environment (any
    launcher: spawn, torchrun, mpirun's -x, srun's exported environment). Returns the
    allocator they run with."""
    from .. import allocator

    if getattr(args, "steady_memory", False):
        os.environ[STEADY_MEMORY_VAR] = "1"
    chosen = allocator.resolve(getattr(args, "allocator", "auto"), getattr(args, "steady_memory", False))
    allocator.apply(chosen)
    return chosen


def apply_perf_options(args: argparse.Namespace, config: TrainConfig) -> TrainConfig:
    config.pin_cores = args.pin_cores
    config.meta_init = getattr(args, "meta_init", "auto")
    config.allocator = getattr(args, "allocator", "auto")
    return config
