"""`scaletrain train` flags for speed: gradient compression, DDP's buckets, core pinning.

They become `TrainConfig.strategy_options` (asked of the strategy, which says which options
it accepts) and `TrainConfig.pin_cores`.
"""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..strategies import REGISTRY
from ..strategies.ddp_compression import COMPRESSIONS
from ..train.config import TrainConfig
from .parsing import positive_float


def add_perf_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speed")
    g.add_argument("--grad-compression", choices=COMPRESSIONS, default="none",
                   help="send gradients in fewer bytes: bf16 or fp16 (half the bytes), powersgd (low rank); "
                        "for communication-bound models (default none: exact fp32)")
    g.add_argument("--bucket-cap-mb", type=positive_float, metavar="MB",
                   help="DDP gradient bucket size in MB (default: torch's 25)")
    g.add_argument("--no-pin-cores", dest="pin_cores", action="store_false",
                   help="do not bind each process to its own CPU cores (default: bind, when this machine's "
                        "cores can be shared out and no launcher bound them already)")


def apply_perf_options(args: argparse.Namespace, config: TrainConfig) -> TrainConfig:
    """Moves the speed flags into `config`; a flag the strategy cannot use is a UsageError."""
    accepted = getattr(REGISTRY.get(config.strategy), "option_flags", {})
    wanted = {}
    if args.grad_compression != "none":
        wanted["grad_compression"] = args.grad_compression
    if args.bucket_cap_mb is not None:
        wanted["bucket_cap_mb"] = args.bucket_cap_mb
    for option, value in wanted.items():
        if option not in accepted:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} {value} does not apply to --strategy {config.strategy}; "
                             f"use it with a strategy that all-reduces gradients (e.g. --strategy ddp)")
    # DDP's static_graph stays off (an option of the strategy only): with it, torch's DDP
    # fails in no_sync() (gradient accumulation) before the first synchronised step.
    config.strategy_options = {**config.strategy_options, **wanted}
    config.pin_cores = args.pin_cores
    return config
