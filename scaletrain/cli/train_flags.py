"""`scaletrain train`'s flags — generated from TrainConfig's fields, the strategies' options and
the launch settings — which are also the schema of its configuration files; and a run's
configuration as its config.yaml holds it."""

from __future__ import annotations

import argparse

from ..foundation.options import add_declared_arguments
from ..strategies.flags import add_strategy_arguments, common_option_defaults
from ..train.config import TrainConfig
from . import config_file
from .parsing import OneLineParser

NAME = "train"
HELP = "train a model (the built-in digits CNN by default) with a strategy on N processes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_declared_arguments(p, TrainConfig, nproc_default="one per GPU, else one per CPU core; 1 for one-process "
                                                         "strategies",
                           between={"strategy_options": add_strategy_arguments})


def build_parser() -> OneLineParser:
    """`scaletrain train`'s own parser: its flags, and the schema of its configuration files."""
    p = OneLineParser(prog=f"scaletrain {NAME}", description=HELP)
    add_arguments(p)
    return p


def record(config: TrainConfig, **resolved) -> dict:
    """The run's configuration as config.yaml holds it: every flag's value, `resolved` ones
    (what the defaults came to) included. Of the strategy options, those every strategy
    takes (precision, grad_accum, compile) are always there; the others only when given."""
    values = {**common_option_defaults(), **config.flag_values(), **resolved}
    return config_file.record(argparse.Namespace(**values), build_parser())
