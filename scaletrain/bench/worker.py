"""One bench configuration, measured as one rank of a job (written on the public API).

Throughput runs: warm-up steps, then synchronised steps one after another as training runs
them (samples/s is from their wall time), then — on several processes — blocks of
synchronised and no-sync steps in turn, so that exposed communication is the difference of
two medians taken under the same load. Accuracy runs: whole epochs of synchronised steps
with the learning-rate rule and warm-up, the held-out evaluation, then the blocks.
"""

from __future__ import annotations

import torch

from ..api import init
from ..measure.clock import Clock
from ..measure.steps import NOSYNC, SYNC, PARTS, breakdown, forever, steps_to_measure, timed_steps
from ..train.optimizer import adam
from ..workloads import get_workload
from .lr import lr_factor, warmup_multiplier
from .spec import BenchSettings


#: Synchronised and no-sync steps alternate in blocks of this many, so that both see the same
#: load, while a synchronised step rarely follows a no-sync one: processes drift apart during
#: no-sync steps and the next synchronised step would absorb that drift as waiting.
BLOCK = 5


def measured_kinds(steps: int, world_size: int) -> list[str]:
    """`steps` synchronised steps (rounded up to whole blocks), as many no-sync ones between
    them; one process has nothing to synchronise and runs synchronised steps only."""
    if world_size == 1:
        return [SYNC] * steps
    blocks = -(-steps // BLOCK)
    return ([SYNC] * BLOCK + [NOSYNC] * BLOCK) * blocks


def measure(settings: BenchSettings, strategy: str, threads: int | None, lr_scaling: str) -> dict:
    workload = get_workload(settings.workload, settings.model, settings.dataset, settings.seq_len)
    with init(strategy=strategy, backend=settings.backend, device=settings.device, threads=threads,
              seed=settings.seed, **settings.strategy_options) as run:
        train_set, held_out = workload.build_datasets(settings.seed)
        model = workload.build_model()
        base_lr = settings.lr if settings.lr is not None else workload.lr
        factor = lr_factor(lr_scaling, run.data_parallel_size)
        optimizer = adam(model.parameters(), lr=base_lr * factor)  # the trainer's: fused where it can be
        model, optimizer = run.setup(model, optimizer)
        loader = run.loader(train_set, batch_size=settings.batch_size, shuffle=True)
        warm = settings.lr_warmup_steps if settings.lr_warmup_steps is not None else len(loader)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_multiplier(step, factor, warm))
        task = workload.training_task(train_set[0])  # its loss (cross-entropy, a language model's, ...)
        loss_fn = task.loss_fn
        batches = forever(loader)
        clock = Clock(run.device)
        result = {}
        if settings.accuracy:
            epochs = settings.epochs or workload.epochs
            timed_steps(run, model, optimizer, batches, loss_fn, [SYNC] * (epochs * len(loader)), clock,
                        scheduler)
            result.update({f"eval_{k}": v for k, v in run.evaluate(model, held_out, loss_fn=loss_fn,
                                                                           metrics=task.metrics).items()})
            result["epochs"] = epochs
            skip, steps = settings.warmup, settings.steps
        else:
            warming = Clock(run.device)
            timed_steps(run, model, optimizer, batches, loss_fn, [SYNC] * settings.warmup, warming, scheduler)
            steps = steps_to_measure(run, warming, SYNC, settings.steps, settings.min_seconds)
            timed_steps(run, model, optimizer, batches, loss_fn, [SYNC] * steps, clock, scheduler)
            skip = 0
        comm_clock = None
        if run.world_size > 1:  # then the blocks that tell communication from computation
            comm_clock = Clock(run.device)
            timed_steps(run, model, optimizer, batches, loss_fn, measured_kinds(steps, run.world_size),
                        comm_clock, scheduler)
        parts = breakdown(clock, skip, comm_clock)
        # Every rank measured its own steps; the job's figures are the ranks' averages
        # (one collective, after the measurement).
        keys = ["step_s", *PARTS]
        averaged = run.mean(torch.tensor([parts[k] for k in keys], dtype=torch.float64))
        parts.update({k: float(v) for k, v in zip(keys, averaged)})
        global_batch = settings.batch_size * run.data_parallel_size
        result.update({
            **run.describe(),
            **parts,
            "batch_size_per_process": settings.batch_size,
            "global_batch_size": global_batch,
            "samples_per_s": global_batch / parts["step_s"],
            "lr_scaling": lr_scaling,
            "lr_factor": factor,
            "lr": base_lr * factor,
            "lr_warmup_steps": warm if factor != 1.0 else 0,
            "train_samples": len(train_set),
        })
        return result
