"""The command-line flags particular to strategies, and how they become
`TrainConfig.strategy_options` (the keyword arguments of `scaletrain.init`).

Only flags the user gave become options, so a strategy can tell "not given" from a default
and reject a flag that means nothing to it (--microbatches with ddp) in one line."""

from __future__ import annotations

import argparse

from .parsing import positive_int

#: option name (keyword of scaletrain.init) -> argparse destination
OPTIONS = ("devices_per_process", "microbatches", "split_points", "pipeline_stages", "schedule",
           "precision", "grad_accum")


def add_strategy_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("strategy options")
    g.add_argument("--devices-per-process", type=positive_int, metavar="K",
                   help="dp: devices to replicate over; mp/hybrid: parts to split the model into, one per device "
                        "(cuda:0..K-1; all on the CPU when there is no GPU). Default: the GPUs each process may use, "
                        "2 parts on a CPU")
    g.add_argument("--microbatches", type=positive_int, metavar="M",
                   help="mp/hybrid/pipeline: micro-batches each batch is cut into so that parts overlap "
                        "(mp/hybrid default 1; pipeline default: the number of stages, and M must divide --batch-size)")
    g.add_argument("--split-points", metavar="BLOCK,BLOCK",
                   help="mp/hybrid/pipeline: blocks at which a new part starts (e.g. conv2,fc1) instead of the "
                        "automatic split that balances parameters")
    g.add_argument("--pipeline-stages", type=positive_int, metavar="S",
                   help="pipeline: stages, one process each; the world size must be a multiple S×R, giving R "
                        "data-parallel replicas of the pipeline (default: the world size)")
    g.add_argument("--schedule", choices=["gpipe", "1f1b"],
                   help="pipeline: gpipe (all forwards, then all backwards) or 1f1b (default; fewer activations kept)")
    g.add_argument("--precision", choices=["fp32", "bf16"],
                   help="fp32 (default) or bf16 autocast for forward and loss")
    g.add_argument("--grad-accum", type=positive_int, metavar="N",
                   help="micro-steps per optimizer step; gradients are synchronised on the last one only, so "
                        "the effective batch grows N times (default 1)")


def strategy_options_from_args(args: argparse.Namespace) -> dict:
    """The strategy options the user gave, as keyword arguments for scaletrain.init."""
    return {name: getattr(args, name) for name in OPTIONS if getattr(args, name, None) is not None}
