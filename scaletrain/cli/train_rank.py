"""One rank of a run that `scaletrain train` launched.

The command did the deciding: it read the flags and the --config file, validated them
(the strategy's checks on a meta-device model), resolved the workload's defaults, checked
what a resume will load, created and locked the output folder and wrote its config.yaml.
It hands each rank the outcome, the run's TrainConfig as JSON in the rank's argv (what
`--dry-run` shows), and the rank trains: it builds the model once and parses, resolves and
writes nothing the command has done already.

    python -m scaletrain.launchers.rank -m scaletrain.cli.train_rank '{"config": {...}, "record": null}'
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import replace
from typing import Optional

from ..errors import UsageError, as_flags
from ..launchers.failures import say_usage_error

MODULE = __name__


def rank_args(config, record: Optional[dict] = None) -> tuple[str]:
    """The argv after `-m MODULE`. `record`: config.yaml's values, for rank 0 to write when
    no command could (nodes that number themselves: none knows it is node 0)."""
    return (json.dumps({"config": json.loads(config.to_json()), "record": record}),)


def train_rank(config, rank: int, record: Optional[dict], resume_checked: bool) -> None:
    """Trains as `rank`; given a `record` (no command holds the folder), rank 0 first takes
    the folder and writes the record as config.yaml."""
    from ..train.loop import train
    from . import config_file
    from .outdir import hold_out

    with contextlib.ExitStack() as held:
        if record is not None and rank == 0:
            held.enter_context(hold_out(config.out, may_hold_files=True))
            config_file.write(config.out / config_file.CONFIG_FILE, record)
        train(config, config.out, resume_checked=resume_checked)


def said_by_this_rank(exc: UsageError, rank: int) -> bool:
    """An error every rank raises alike is said by rank 0 only (see UsageError)."""
    return rank == 0 or not exc.same_on_every_rank


def main(argv: Optional[list[str]] = None) -> int:
    from ..environment import detect
    from ..launchers.interrupts import sigint_as_python
    from ..train import loop  # noqa: F401 - torch and the trainer, before Ctrl-C may raise again
    from ..train.config import TrainConfig

    sigint_as_python()
    settings = json.loads((sys.argv[1:] if argv is None else argv)[0])
    config = TrainConfig.from_json(json.dumps(settings["config"]))
    config = replace(config, resume=config.resume_after_agent_restart(os.environ))
    rank = detect(os.environ).rank
    try:
        train_rank(config, rank, settings.get("record"), resume_checked=True)
    except UsageError as exc:
        if said_by_this_rank(exc, rank):
            say_usage_error(as_flags(exc.raw))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
