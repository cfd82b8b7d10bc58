"""The built-in trainer. It is written on the public library API (`scaletrain.init`, `run.*`),
exactly as a user's own loop would be."""

from __future__ import annotations

import contextlib
import math
import time
from datetime import timedelta
from pathlib import Path

import torch

from ..version import __version__
from ..memory.allocator import described as described_allocator
from ..api import init
from ..data.batches import batch_size_of
from ..parallel.meta_init import uninitialisable
from ..foundation.errors import UsageError, arg
from ..process.startup_time import command_age
from ..process.startup_timeline import mark
from ..workloads.model_config import workload_for
from ..workloads.tasks import check_targets, derive, first_sample, get_task
from .checkpoints import TrainerCheckpoints
from .config import TrainConfig
from .finite import NonFiniteGuard
from .optimizer import adam
from .report import Reporter
from .steps import StepRecorder
from .utilisation import Utilisation
from ..foundation.text_values import AUTO


def train(config: TrainConfig, out: Path, resume_checked: bool = False) -> dict:
    """Trains in this process, as one rank of whatever job the environment describes.
    `resume_checked`: the command that started the run checked what --resume will load and
    showed its notes, so they are not shown again."""
    started = time.perf_counter()
    mark("rank: train")
    workload = workload_for(config)
    lr = config.lr if config.lr is not None else workload.lr
    with init(strategy=config.strategy, backend=config.backend, device=config.device, threads=config.threads,
              seed=config.seed, timeout=timedelta(seconds=config.timeout_seconds) if config.timeout_seconds else None,
              pin=config.pin_cores, trackers=config.trackers, tracker_dir=out, dump_dir=out,
              **config.strategy_options) as run:
        mark("rank: process group")
        train_set, held_out = workload.build_datasets(config.seed)
        mark("rank: data built")
        sample = first_sample(train_set)
        task = get_task(config.task_name or workload.task or derive(sample))
        check_targets(task, sample)  # every rank alike, before anything waits for a peer
        with fits_in_memory(run):
            model = build_model(run, workload, config.meta_init)
            optimizer = adam(model.parameters(), lr=lr)
            mark("rank: model built")
            model, optimizer = run.setup(model, optimizer)
            mark("rank: model set up")
        loader = run.loader(train_set, batch_size=config.batch_size, shuffle=True)
        epochs, last_step = training_length(config, workload.epochs, len(loader), run.strategy.grad_accum)
        reporter = Reporter(run.is_main, out, run.trackers)
        global_batch = config.batch_size * run.data_parallel_size * run.strategy.grad_accum  # samples per optimizer step
        reporter.say(f"scaletrain: {run.strategy.name} on {run.world_size} process(es) × {run.threads} thread(s), "
                     f"{run.backend} on {run.device}; {workload.name} ({task.name}), global batch {global_batch}, "
                     f"{epochs} epoch(s)")
        if run.trackers:
            reporter.say(f"scaletrain: tracking with {run.trackers.describe()}")
        run.log_config({**config.as_dict(), "epochs": epochs, "lr": lr, "task": task.name, "world_size": run.world_size,
                        "global_batch_size": global_batch, "workload_name": workload.name})

        checkpoints = TrainerCheckpoints(run, out, config.checkpoint_every, config.keep_checkpoints, config.resume,
                                         reporter.say, config.checkpoint_layout, notes_shown=resume_checked,
                                         asynchronous=config.checkpoint_async)
        start = checkpoints.resume(model, optimizer, loader, epochs)
        finite = checkpoints.finite = NonFiniteGuard(run, model, config.log_every_steps, config.allow_nonfinite, lr,
                                                     run.steps_taken, reporter.say)
        if reporter.start_at(run.steps_taken, start["epoch"]):  # metrics.jsonl never holds a step or epoch twice
            run.trackers.resumed(run.steps_taken)

        def wall() -> float:  # the run's time so far, across resumes
            return reporter.wall_offset + time.perf_counter() - started

        recorder = StepRecorder(config.log_every_steps, config.log_every_seconds, last_step,
                                run.steps_taken, run.data_parallel_size, _rank_has_loss(run))
        utilisation = Utilisation(run, global_batch)  # FLOPs counted on the second step, MFU
        train_seconds, trained_samples, startup_seconds, record = 0.0, 0.0, None, {}
        if run.steps_taken >= last_step:
            done = run.steps_taken // run.strategy.grad_accum
            raise UsageError(f"the checkpoint resumed is at optimizer step {done}, where this run would stop; give "
                             f"{arg('max_steps', done + 1)} or more (or more {arg('epochs')}) to train it further")
        for epoch in range(start["epoch"], epochs + 1):
            if run.steps_taken >= last_step:  # --max-steps reached
                break
            loss_sum = torch.full((), start["loss_sum"], device=run.device)
            steps, samples = start["steps"], start["samples"]
            recorder.begin_epoch(start["loss_sum"], steps, samples)
            start = {"loss_sum": 0.0, "steps": 0, "samples": 0}
            epoch_start = time.perf_counter()
            in_epoch = min(len(loader), last_step - (epoch - 1) * len(loader))
            with reporter.progress(in_epoch, f"epoch {epoch}/{epochs}") as advance:
                for batch in loader:
                    if run.steps_taken >= last_step:
                        break
                    # The loss stays a tensor: no host synchronisation (.item()) per step.
                    with utilisation.step(run.steps_taken, batch_size_of(batch)):
                        loss = run.train_step(model, optimizer, batch, loss_fn=task.loss_fn,
                                              max_grad_norm=config.clip_grad_norm)
                    loss_sum += loss
                    finite.track(loss, run.steps_taken)
                    if startup_seconds is None:  # from the user's command, not from train()
                        startup_seconds = command_age(run.env) or time.perf_counter() - started
                        mark("rank: first step done")
                    steps += 1
                    samples += batch_size_of(batch)
                    advance()
                    if finite.due(run.steps_taken):  # every rank at the same step: a collective
                        finite.check(run.steps_taken)
                    if run.is_main and recorder.due(run.steps_taken):
                        record = recorder.record(run.steps_taken, epoch, epochs, loss_sum, steps, samples,
                                                 optimizer.param_groups[0].get("lr"))
                        reporter.step({**record, **utilisation.fields(record["samples_per_second"]),
                                       "wall_seconds": wall(), "memory_bytes": run.memory.current()})
                    checkpoints.after_step(model, optimizer, loader, {"loss_sum": loss_sum, "steps": steps,
                                                                      "samples": samples})
            seconds = time.perf_counter() - epoch_start - utilisation.take_paused()
            epoch_samples = run.sum(float(samples)) * run.data_parallel_size / run.world_size
            train_seconds += seconds
            trained_samples += epoch_samples
            finite.check(run.steps_taken)
            evaluation = run.evaluate(model, held_out, batch_size=config.eval_batch_size, loss_fn=task.loss_fn,
                                      metrics=task.metrics)
            record = {"kind": "epoch", "epoch": epoch, "epochs": epochs, "step": run.steps_taken,
                      "train_loss": run.mean(loss_sum / max(steps, 1)).item(),
                      **{f"eval_{name}": evaluation[name] for name in task.metrics},
                      "eval_samples": evaluation["count"], "samples_per_second": epoch_samples / seconds,
                      "epoch_seconds": seconds, "lr": optimizer.param_groups[0].get("lr"), "wall_seconds": wall()}
            reporter.epoch(record)
        checkpoints.at_end(model, optimizer, loader, {"loss_sum": loss_sum, "steps": steps, "samples": samples})
        checkpoints.finish()

        summary = {
            **run.describe(),
            "workload": workload.name,
            "epochs": epochs,
            "optimizer_steps": run.steps_taken // run.strategy.grad_accum,
            **({"auto_choice": config.auto_choice} if config.auto_choice else {}),
            "max_steps": config.max_steps,
            "batch_size_per_process": config.batch_size,
            "global_batch_size": global_batch,
            "lr": lr,
            "seed": config.seed,
            "task": task.name,
            **{f"final_{name}": record[f"eval_{name}"] for name in task.metrics},
            "final_train_loss": record["train_loss"],
            "eval_samples": record["eval_samples"],
            "train_samples": len(train_set),
            "samples_per_second": trained_samples / train_seconds,
            "train_seconds": train_seconds,
            **utilisation.summary(trained_samples / train_seconds),
            "startup_seconds": startup_seconds,
            "allocator": described_allocator(),  # the CPU memory allocator the processes ran with
            # From the user's command, like the start-up time (this process's own time otherwise).
            "wall_seconds": command_age(run.env) or time.perf_counter() - started,
            "torch_version": torch.__version__,
            "scaletrain_version": __version__,
            **checkpoints.summary(),
        }
        reporter.finish(summary)
        return summary


def build_model(run, workload, meta_init: str):
    """The workload's model: on the meta device where the run shards it (no process holds it
    whole: each materialises its own share at setup) and replaying its modules' own
    initialisation there gives exactly the weights of an ordinary build, else whole.
    `meta_init`: auto, always or never. An ordinary build after a meta one draws the same
    numbers: none were drawn on meta."""
    if meta_init == "never" or (meta_init == AUTO and not run.topology.shards_state):
        return workload.build_model()
    with run.meta_device():
        model = workload.build_model()
    if meta_init == AUTO and uninitialisable(model):
        return workload.build_model()
    why = run.meta_init_difference(model)
    if why:  # the replay would change what trains: build it the ordinary way
        if run.is_main:
            print(f"scaletrain: meta-device initialisation not used: {why}; each process builds the whole model, "
                  "then keeps its share", flush=True)
        return workload.build_model()
    return model


@contextlib.contextmanager
def fits_in_memory(run):
    """The model not fitting this process's memory, in one line with what would make it fit."""
    try:
        yield
    except RuntimeError as exc:
        if "can't allocate memory" not in str(exc) and "out of memory" not in str(exc).lower():
            raise
        raise UsageError(f"the model does not fit this process's memory ({str(exc).splitlines()[0].strip()}); shard it "
                         f"over more processes ({arg('strategy', 'fsdp')} with a larger {arg('nproc_per_node')}), "
                         f"checkpoint activations ({arg('activation_checkpointing', 'full')}), or see what fits with "
                         f"`scaletrain plan --device-memory-gb`") from None


def training_length(config: TrainConfig, default_epochs: int, steps_per_epoch: int, grad_accum: int) -> tuple[int, int]:
    """(epochs, training steps in all): --epochs (or the workload's), cut short by --max-steps
    optimizer steps of `grad_accum` micro-steps each; --max-steps alone takes as many epochs
    as it needs."""
    if config.max_steps is None:
        epochs = config.epochs or default_epochs
        return epochs, epochs * steps_per_epoch
    steps = config.max_steps * grad_accum
    needed = max(1, math.ceil(steps / max(1, steps_per_epoch)))
    epochs = min(config.epochs, needed) if config.epochs else needed
    return epochs, min(steps, epochs * steps_per_epoch)


def _rank_has_loss(run) -> bool:
    """Whether this process computes the loss itself (a pipeline's first stage does not)."""
    return run.topology.holds_outputs
