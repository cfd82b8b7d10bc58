"""`scaletrain train` flags for speed that are not a strategy's: core pinning.

(Gradient compression and DDP's bucket size are options of the ddp strategy: their flags
are generated with the other strategy options, see strategy_options.py.)
"""

from __future__ import annotations

import argparse

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
                        "Hugging Face model); the weights are those of an ordinary build from the same seed")


def apply_perf_options(args: argparse.Namespace, config: TrainConfig) -> TrainConfig:
    config.pin_cores = args.pin_cores
    config.meta_init = getattr(args, "meta_init", "auto")
    return config
