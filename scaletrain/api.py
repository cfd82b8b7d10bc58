"""The public library API: `scaletrain.init()` and the `Run` it returns.

    run = scaletrain.init(strategy="ddp")
    model, optimizer = run.setup(model, optimizer)
    loader = run.loader(dataset, batch_size=32, shuffle=True)
    for epoch in range(epochs):
        for batch in loader:
            loss = run.train_step(model, optimizer, batch, loss_fn=loss_fn)
        run.print(run.evaluate(model, held_out, batch_size=256))
    run.close()

The same script runs as one process (`python script.py`) and under any launcher
(torchrun, mpirun, srun, `scaletrain launch`): `init` detects which.
"""

from __future__ import annotations

import contextlib

import os
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from .checkpoint.background import BackgroundSaves
from .fault.hang_evidence import enable_flight_recorder
from .fault.start import backstop_timeout, start_watchdog
from .foundation.defaults import hang_timeout_s
from .foundation.errors import UsageError, arg
from .memory.allocator import return_freed_at_once
from .memory.meter import MemoryMeter
from .memory.steady import make_steady, wanted
from .process import process_group
from .process.backends import choose_backend
from .process.devices import choose_device, pin_cores, threads_per_process
from .process.environment import detect
from .process.process_context import ProcessContext
from .run.run import Run
from .strategies import Strategy, get_strategy, implied_strategy
from .track import Trackers, TrackerSpec, check_trackers, open_trackers


def seed_everything(seed: int) -> None:
    """Same seed on every rank: every replica starts from the same initial weights."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _timeout(value: Optional[float | timedelta]) -> timedelta:
    """A number of seconds, a timedelta, or None (the default: the measurement's that started
    this process, where one did — HANG_TIMEOUT_VAR — else HANG_TIMEOUT_S)."""
    if value is None:
        return timedelta(seconds=hang_timeout_s())
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise UsageError(f"{arg('timeout', value)}: give a number of seconds or a datetime.timedelta")
    if not seconds > 0:
        raise UsageError(f"{arg('timeout', value)}: must be longer than 0 seconds")
    return timedelta(seconds=seconds)


def init(strategy: Optional[str | Strategy] = None, *, backend: Optional[str] = None, device: Optional[str] = None,
         threads: Optional[int] = None, seed: Optional[int] = 0, timeout: Optional[float | timedelta] = None,
         environ: Optional[Mapping[str, str]] = None, pin: bool = True, trackers: Sequence[TrackerSpec] = (),
         tracker_dir: Optional[str | Path] = None, steady_memory: Optional[bool] = None,
         dump_dir: Optional[str | Path] = None, **strategy_options: Any) -> Run:
    """Detects the environment, sets up the process group, device, backend and threads.

    `strategy`: a name or a Strategy; without one, what the degrees given imply (as on the
    command line: `cp=2` or `dp_shard=2` fsdp, `tp=2` alone tp, `pp=2` pipeline), else ddp.
    Without a launcher this is one process (rank 0 of 1); under torchrun, mpirun, srun or
    `scaletrain launch` it joins the job. `seed` is applied on every rank (None: leave the
    random state alone). `timeout`: seconds (or a timedelta) a rank waits for its peers
    before naming the missing ones and exiting (default defaults.HANG_TIMEOUT_S). `pin`:
    bind each of a node's processes to its own cores (see `devices.pin_cores`); False
    leaves the affinity to the operating system. `trackers`: names ("tensorboard", "wandb",
    "mlflow", "csv") or tracker objects, opened on rank 0 and writing under `tracker_dir`
    (default: a new folder under runs/); see `run.log`. `steady_memory`: give freed tensors of
    2 MB and more back to the system at once, so that a CPU process's resident memory is what
    it holds (see `steady_memory`; None: as $SCALETRAIN_STEADY_MEMORY says). `dump_dir`: where
    a hang's evidence goes, every rank's stacks and last collectives in `hang-<attempt>/`
    (default: `tracker_dir`, else `runs/`)."""
    env = detect(os.environ if environ is None else environ)
    if wanted(steady_memory, os.environ if environ is None else environ):
        make_steady()  # before the model and the data: every large tensor from here on
    strat = get_strategy(strategy or implied_strategy(strategy_options), **strategy_options)
    wait = _timeout(timeout)
    check_trackers(trackers)  # a missing package is found before any process waits for this one
    dev = choose_device(device, strat.device_slot(env.local_rank, env.local_world_size))
    chosen_backend = choose_backend(backend, dev.type)
    n_threads = threads_per_process(env.local_world_size, threads)
    cores = pin_cores(env.local_rank, env.local_world_size) if pin and environ is None else None
    if cores and threads is None:
        n_threads = len(cores)  # one thread per core of its own
    torch.set_num_threads(n_threads)
    if seed is not None:
        seed_everything(seed)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    ctx = ProcessContext(env, dev, chosen_backend, n_threads)
    strat.validate(ctx)  # before joining: a doomed run should not make its peers wait
    topology = strat.topology(ctx)
    if topology.shards_state and ctx.device.type == "cpu":
        return_freed_at_once()  # FSDP's gathered blocks, freed, are not held beside the next (memory/allocator.py)
    enable_flight_recorder()  # torch records the group's collectives, for a hang's evidence
    owns_group = process_group.init_process_group(env, chosen_backend, dev, backstop_timeout(wait))
    dumps = Path(dump_dir) if dump_dir is not None else Path(tracker_dir) if tracker_dir is not None else Path("runs")
    watchdog = start_watchdog(env, wait, dumps.absolute())
    memory = MemoryMeter(dev)  # the baseline: the process, torch and its group, no model yet
    opened = Trackers([])
    if trackers:
        where = Path(tracker_dir) if tracker_dir is not None else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
        # A tracking server that never answers is named, not waited on.
        with watchdog.op("opening the trackers") if watchdog is not None else contextlib.nullcontext():
            opened = open_trackers(trackers, where, active=ctx.is_main)
    return Run(env, strat, ctx, topology, seed or 0, owns_group=owns_group, cores=cores, watchdog=watchdog,
               memory=memory, trackers=opened, background_saves=BackgroundSaves(backstop_timeout(wait)))
