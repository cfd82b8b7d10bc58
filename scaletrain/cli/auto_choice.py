"""`scaletrain train --strategy auto`: the planner's choice (scaletrain.plan, choose.py) made in
the command's own process before any rank starts, then trained as if its flags had been given.
The ranks and the run's config.yaml get the chosen strategy and degrees, never "auto"."""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace

from ..foundation.defaults import HANG_TIMEOUT_VAR
from ..foundation.errors import UsageError
from ..foundation.text_values import AUTO
from ..train.config import TrainConfig

#: A choice's measurement: short, since the decision is a small part of a run.
PROBE = {"steps": 10, "warmup": 2, "min_seconds": 0.5, "rounds": 2, "budget_s": 60.0, "max_error": 0.5}


@contextlib.contextmanager
def measurement_timeout(seconds: float):
    """The run's --timeout for every process of its measurement (they inherit HANG_TIMEOUT_VAR):
    a measuring rank that stops or hangs is named and the job ends, as in training."""
    before = os.environ.get(HANG_TIMEOUT_VAR)
    os.environ[HANG_TIMEOUT_VAR] = f"{seconds:g}"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HANG_TIMEOUT_VAR, None)
        else:
            os.environ[HANG_TIMEOUT_VAR] = before


def resolve_auto(config: TrainConfig, nproc: int) -> TrainConfig:
    """The configuration with the chosen strategy and options in place of auto, and the lines
    that say why (`auto_choice`)."""
    from ..process.devices import choose_device
    from ..measure.jobs import check_answering, hosts_from_args
    from ..plan import Candidates, Measuring, PlanRequest, Training, default_machine, make_plan

    launch = config.launch
    # Across --hosts the choice is measured as `plan --choose --hosts` measures it: jobs across
    # them, the network between them timed; every slot of each host trains.
    hosts = hosts_from_args(launch)
    if hosts is not None and launch.nproc_per_node is not None and launch.nproc_per_node != hosts.slots:
        raise UsageError(f"--nproc-per-node {launch.nproc_per_node} and {hosts.flag} ({hosts.slots} per host) differ; "
                         "drop --nproc-per-node: across hosts it is the hosts' slots")
    if hosts is None and (launch.nnodes or 1) > 1:
        # Every node's command would measure and choose on its own, and might choose apart.
        raise UsageError(f"--strategy auto with --nnodes {launch.nnodes}: each node would choose on its own; give the "
                         "machines with --hosts A:N,B:N (mpirun, one choice measured across them), or choose once with "
                         "`scaletrain plan --choose --hosts …` and pass its strategy and degrees to every node")
    check_answering(hosts)  # before anything is measured across them
    world = hosts.world_size if hosts is not None else nproc
    device = choose_device(config.device, 0)
    given = {name: None if getattr(config, name) == AUTO else getattr(config, name) for name in ("device", "backend")}
    request = PlanRequest(Training(config.workload, config.model, config.dataset, config.batch_size, config.seed,
                                   config.seq_len),
                          default_machine(device.type, hosts.slots if hosts is not None else nproc),
                          # The degrees and options given beside auto: the choice keeps them (an impossible
                          # set is refused before a second is measured).
                          Candidates(options=dict(config.strategy_options), choose=world),
                          Measuring(**given, **PROBE, max_other_load=config.max_other_load, hosts=hosts, cached=True,
                                    subject="--strategy auto's measurement"))
    with measurement_timeout(config.timeout_seconds):
        choice = make_plan(request, say=lambda text: print(text, flush=True)).choice
    if choice.chosen is None:
        raise UsageError(f"--strategy auto: {choice.lines()[0]}; give more processes (--nproc-per-node) or a smaller "
                         "--batch-size")
    config = replace(config, strategy=choice.chosen.strategy, auto_choice=" ".join(choice.lines()),
                     strategy_options={**config.strategy_options, **choice.chosen.options})
    if choice.chosen.world_size < world:  # fewer processes predicted faster: train that many, here
        fewer = {"nproc_per_node": choice.chosen.world_size}
        if choice.chosen.world_size == 1:
            fewer.update(hosts=None, hostfile=None)
        config = replace(config, launch=replace(launch, **fewer))
    return config
