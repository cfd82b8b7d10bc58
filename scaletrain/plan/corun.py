"""One process's step time as it will be in a job: n copies of the model train side by side
on this machine, each on the `single` strategy with cores ÷ n threads and no communication.

Measuring one process alone at 1 thread misses what its neighbours cost it: the second
process takes the other core, memory bandwidth and cache, and on a busy machine two
runnable processes get less of it than one. And a synchronous step lasts as long as the
slowest process's: the predicted compute per step is, step by step, the slowest copy's time.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import torch.multiprocessing as mp


def _copy(index: int, spec: dict, barrier, folder: str) -> None:
    import torch
    import torch.nn.functional as F

    from ..api import init
    from ..measure.clock import Clock
    from ..measure.steps import SYNC, forever, timed_steps
    from ..workloads import get_workload

    workload = get_workload(spec["workload"], spec["model"], spec["dataset"])
    # environ={}: not a rank of a job, each copy is a one-process run of its own.
    with init(strategy="single", device=spec["device"], threads=spec["threads"], seed=spec["seed"],
              environ={}) as run:
        train_set, _ = workload.build_datasets(spec["seed"])
        model = workload.build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=workload.lr)
        model, optimizer = run.setup(model, optimizer)
        batches = forever(run.loader(train_set, batch_size=spec["batch_size"], shuffle=True, drop_last=True))
        clock = Clock(run.device)
        timed_steps(run, model, optimizer, batches, F.cross_entropy, [SYNC] * spec["warmup"], clock)
        barrier.wait()  # measure while every copy is running
        timed_steps(run, model, optimizer, batches, F.cross_entropy, [SYNC] * spec["steps"], clock)
        walls = clock.step_walls(SYNC, spec["warmup"])
    Path(folder, f"{index}.json").write_text(json.dumps(walls))


def corun_step_walls(copies: int, spec: dict) -> list[list[float]]:
    """Each copy's step times (seconds), measured while all `copies` run at once."""
    context = mp.get_context("spawn")
    barrier = context.Barrier(copies)
    with tempfile.TemporaryDirectory(prefix="scaletrain-corun-") as folder:
        mp.start_processes(_copy, args=(spec, barrier, folder), nprocs=copies, join=True, start_method="spawn")
        return [json.loads(Path(folder, f"{i}.json").read_text()) for i in range(copies)]


def slowest_per_step(walls: list[list[float]]) -> list[float]:
    """Step by step, the slowest copy's time: what a synchronous step waits for."""
    return [max(step) for step in zip(*walls)]


def corun_step_seconds(copies: int, spec: dict) -> float:
    return statistics.median(slowest_per_step(corun_step_walls(copies, spec)))
