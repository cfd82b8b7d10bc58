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

from ..foundation.errors import UsageError, as_flags
from ..foundation.text_values import AUTO
from ..launchers.failures import say_usage_error

MODULE = __name__


def rank_args(config, record: Optional[dict] = None) -> tuple[str]:
    """The argv after `-m MODULE`. `record`: config.yaml's values, for rank 0 to write when
    no command could (nodes that number themselves: none knows it is node 0)."""
    return (json.dumps({"config": json.loads(config.to_json()), "record": record}),)


def train_rank(config, rank: int, record: Optional[dict], resume_checked: bool, holds_out: bool = False) -> None:
    """Trains as `rank`; where no command holds the folder (`holds_out`, or a `record` to
    write), rank 0 first takes it, and writes the record as config.yaml."""
    from ..train.loop import train
    from . import config_file
    from .outdir import hold_out

    with contextlib.ExitStack() as held:
        if (holds_out or record is not None) and rank == 0:
            held.enter_context(hold_out(config.out, may_hold_files=True))
            if record is not None:
                config_file.write(config.out / config_file.CONFIG_FILE, record)
        train(config, config.out, resume_checked=resume_checked)


def train_here(config_json: str) -> None:
    """The one rank of a run in the command's own process: trains from the configuration as a
    launched rank gets it (JSON), the command holding the folder."""
    from ..train.config import TrainConfig

    train_rank(TrainConfig.from_json(config_json), 0, None, resume_checked=True)


def launched(config) -> int:
    """One rank of a job that torchrun, mpirun or srun started directly (`-m scaletrain
    train ...`): its flags are its own to resolve; rank 0 owns the output folder and writes
    the run's config.yaml (unless it was started with that very file as --config)."""
    from dataclasses import replace
    from pathlib import Path

    from ..process.environment import detect
    from ..memory.steady import pass_on
    from ..track import check_reachable
    from .config_file import CONFIG_FILE
    from .outdir import default_out
    from .resume_checks import check_continuable, check_fault_flags
    from .train_flags import record

    env = detect(os.environ)
    pass_on(config.steady_memory)
    if config.launch.dry_run:  # a dry run never trains, whoever started it
        print(f"dry run: rank {env.rank} of {env.world_size} (started by {env.launcher}) would train "
              f"--strategy {config.strategy} on {config.workload}; nothing was started")
        return 0
    nproc = config.launch.nproc_per_node
    if nproc and nproc != env.local_world_size and env.local_rank == 0:  # once per node, not once per rank
        print(f"scaletrain: note: --nproc-per-node {nproc} ignored: the {env.launcher} launcher "
              f"started {env.local_world_size} process(es) on this node", file=sys.stderr)
    check_fault_flags(config, env)
    config = replace(config, out=Path(config.out or default_out(config.strategy, env.world_size)))
    config = config.with_workload_defaults()
    if env.rank == 0:  # the rank that records the run: its trackers' servers must answer
        config = replace(config, trackers=tuple(check_reachable(config.trackers, config.if_tracker_unreachable)))
    own_record = config.out / CONFIG_FILE
    reads_own_record = bool(config.config_file) and Path(config.config_file).absolute() == own_record.absolute()
    if config.resume == AUTO:
        check_continuable(config.out, config.epochs, config.max_steps)
    recorded = record(config, nproc_per_node=env.local_world_size, nnodes=env.nnodes) \
        if env.rank == 0 and not reads_own_record else None
    try:
        train_rank(config, env.rank, recorded, resume_checked=False, holds_out=True)  # rank 0 shows the resume's notes
    except UsageError as exc:
        if not said_by_this_rank(exc, env.rank):  # rank 0 says it; the others stop silently
            return 2
        raise
    return 0


def said_by_this_rank(exc: UsageError, rank: int) -> bool:
    """An error every rank raises alike is said by rank 0 only (see UsageError)."""
    return rank == 0 or not exc.same_on_every_rank


def main(argv: Optional[list[str]] = None) -> int:
    from ..process.environment import detect
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
