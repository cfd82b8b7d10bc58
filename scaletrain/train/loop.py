"""The built-in trainer. It is written on the public library API (`scaletrain.init`, `run.*`),
exactly as a user's own loop would be."""

from __future__ import annotations

import contextlib
import math
import time
from datetime import timedelta
from pathlib import Path

import torch

from ..api import init
from ..checkpoint.compat import resume_facts
from ..data.batches import batch_size_of
from ..foundation.errors import UsageError, arg
from ..foundation.text_values import AUTO
from ..memory.allocator import described as described_allocator, described_reason as allocator_reason
from ..parallel.expert_load import ExpertLoad
from ..parallel.meta_init import uninitialisable
from ..process.startup_time import command_age
from ..process.startup_timeline import mark
from ..version import __version__
from ..workloads.model_config import workload_for
from ..workloads.tasks import check_targets, derive, first_sample, get_task
from .checkpoints import TrainerCheckpoints
from .config import TrainConfig
from .finite import NonFiniteGuard
from .optimizer import adam
from .report import Reporter
from .steps import StepRecorder
from .utilisation import Utilisation


def train(config: TrainConfig, out: Path, resume_checked: bool = False) -> dict:
    """Trains in this process, as one rank of whatever job the environment describes.
    `resume_checked`: the command that started the run checked what --resume will load and
    showed its notes, so they are not shown again."""
    started = time.perf_counter()
    mark("rank: train")
    workload = workload_for(config)
    with init(strategy=config.strategy, backend=config.backend, device=config.device, threads=config.threads,
              seed=config.seed, timeout=timedelta(seconds=config.timeout_seconds) if config.timeout_seconds else None,
              pin=config.pin_cores, trackers=config.trackers, tracker_dir=out, dump_dir=out,
              **config.strategy_options) as run:
        mark("rank: process group")
        trainer = Trainer(run, config, workload, out, resume_checked, started)
        trainer.train()
        return trainer.finish()


class Trainer:
    """One rank's training: set up once (data, task, model, loader, records, checkpoints —
    resumed where one is found), then its epochs of steps, each ended by an evaluation, then
    its summary."""

    def __init__(self, run, config: TrainConfig, workload, out: Path, resume_checked: bool, started: float):
        self.run, self.config, self.workload, self.started = run, config, workload, started
        self.lr = config.lr if config.lr is not None else workload.lr
        self.train_set, self.held_out = workload.build_datasets(config.seed)
        mark("rank: data built")
        self.eval_batch_size, self.notes = batch_sizes(config, self.train_set, self.held_out)
        sample = first_sample(self.train_set)
        self.task = get_task(config.task_name or workload.task or derive(sample))
        check_targets(self.task, sample)  # every rank alike, before anything waits for a peer
        with fits_in_memory(run):
            model = build_model(run, workload, config.meta_init)
            optimizer = adam(model.parameters(), lr=self.lr)
            mark("rank: model built")
            self.model, self.optimizer = run.setup(model, optimizer)
            mark("rank: model set up")
        self.loader = run.loader(self.train_set, batch_size=config.batch_size, shuffle=True)
        self.epochs, self.last_step = training_length(config, workload.epochs, len(self.loader),
                                                      run.strategy.grad_accum)
        self.reporter = Reporter(run.is_main, out, run.trackers)
        # samples per optimizer step
        self.global_batch = config.batch_size * run.data_parallel_size * run.strategy.grad_accum
        self._announce()
        self.checkpoints = TrainerCheckpoints(run, out, config.checkpoint_every, config.keep_checkpoints,
                                              config.resume, self.reporter.say, config.checkpoint_layout,
                                              notes_shown=resume_checked, asynchronous=config.checkpoint_async,
                                              facts=resume_facts(workload))
        self.start = self.checkpoints.resume(self.model, self.optimizer, self.loader, self.epochs)
        self.finite = self.checkpoints.finite = NonFiniteGuard(run, self.model, config.log_every_steps,
                                                               config.allow_nonfinite, self.lr, run.steps_taken,
                                                               self.reporter.say)
        if self.reporter.start_at(run.steps_taken, self.start["epoch"]):  # metrics.jsonl never holds a step twice
            run.trackers.resumed(run.steps_taken)
        # A mixture of experts: the tokens each expert receives (nothing for a dense model).
        self.load = ExpertLoad(run.unwrap(self.model), run.device, run.topology.dims.tp)
        self.recorder = StepRecorder(config.log_every_steps, config.log_every_seconds, self.last_step,
                                     run.steps_taken, run.data_parallel_size, _rank_has_loss(run))
        self.utilisation = Utilisation(run, self.global_batch)  # FLOPs counted on the second step, MFU
        self.train_seconds, self.trained_samples, self.startup_seconds, self.record = 0.0, 0.0, None, {}
        self.totals = {"loss_sum": 0.0, "steps": 0, "samples": 0}  # the epoch's running totals
        if run.steps_taken >= self.last_step:
            done = run.steps_taken // run.strategy.grad_accum
            raise UsageError(f"the checkpoint resumed is at optimizer step {done}, where this run would stop; give "
                             f"{arg('max_steps', done + 1)} or more (or more {arg('epochs')}) to train it further")

    def _announce(self) -> None:
        run, config = self.run, self.config
        self.reporter.say(f"scaletrain: {run.strategy.name} on {run.world_size} process(es) × {run.threads} "
                          f"thread(s), {run.backend} on {run.device}; {self.workload.name} ({self.task.name}), "
                          f"global batch {self.global_batch}, {self.epochs} epoch(s)")
        if run.trackers:
            self.reporter.say(f"scaletrain: tracking with {run.trackers.describe()}")
        for note in self.notes:
            self.reporter.say(f"scaletrain: note: {note}")
        run.log_config({**config.as_dict(), "epochs": self.epochs, "lr": self.lr, "task": self.task.name,
                        "world_size": run.world_size, "global_batch_size": self.global_batch,
                        "workload_name": self.workload.name})

    def wall(self) -> float:
        """The run's time so far, across resumes."""
        return self.reporter.wall_offset + time.perf_counter() - self.started

    def train(self) -> None:
        for epoch in range(self.start["epoch"], self.epochs + 1):
            if self.run.steps_taken >= self.last_step:  # --max-steps reached
                break
            self._epoch(epoch)
        self.checkpoints.at_end(self.model, self.optimizer, self.loader, self.totals)
        self.checkpoints.finish()

    def _epoch(self, epoch: int) -> None:
        """One epoch's steps (from where a resumed one stopped), then its evaluation."""
        run, start = self.run, self.start
        self.totals = {"loss_sum": torch.full((), start["loss_sum"], device=run.device), "steps": start["steps"],
                       "samples": start["samples"]}
        self.recorder.begin_epoch(start["loss_sum"], start["steps"], start["samples"])
        self.start = {"loss_sum": 0.0, "steps": 0, "samples": 0}
        epoch_start = time.perf_counter()
        in_epoch = min(len(self.loader), self.last_step - (epoch - 1) * len(self.loader))
        with self.reporter.progress(in_epoch, f"epoch {epoch}/{self.epochs}") as advance:
            for batch in self.loader:
                if run.steps_taken >= self.last_step:
                    break
                self._step(batch, epoch)
                advance()
        seconds = time.perf_counter() - epoch_start - self.utilisation.take_paused()
        epoch_samples = run.sum(float(self.totals["samples"])) * run.data_parallel_size / run.world_size
        self.train_seconds += seconds
        self.trained_samples += epoch_samples
        self.finite.check(run.steps_taken)
        if self.load:
            self.load.sync()
        self._evaluate(epoch, seconds, epoch_samples)

    def _step(self, batch, epoch: int) -> None:
        run, totals = self.run, self.totals
        # The loss stays a tensor: no host synchronisation (.item()) per step.
        with self.utilisation.step(run.steps_taken, batch_size_of(batch)):
            loss = run.train_step(self.model, self.optimizer, batch, loss_fn=self.task.loss_fn,
                                  max_grad_norm=self.config.clip_grad_norm)
        totals["loss_sum"] += loss
        self.finite.track(loss, run.steps_taken)
        if self.startup_seconds is None:  # from the user's command, not from train()
            self.startup_seconds = command_age(run.env) or time.perf_counter() - self.started
            mark("rank: first step done")
        totals["steps"] += 1
        totals["samples"] += batch_size_of(batch)
        if self.load:
            self.load.step_done()
        if self.finite.due(run.steps_taken):  # every rank at the same step: a collective
            self.finite.check(run.steps_taken)
            if self.load:
                self.load.sync()
        if run.is_main and self.recorder.due(run.steps_taken):
            record = self.recorder.record(run.steps_taken, epoch, self.epochs, totals["loss_sum"], totals["steps"],
                                          totals["samples"], self.optimizer.param_groups[0].get("lr"))
            self.reporter.step({**record, **self.utilisation.fields(record["samples_per_second"]),
                                "wall_seconds": self.wall(), "memory_bytes": run.memory.current(),
                                **self.load.record()})
        self.checkpoints.after_step(self.model, self.optimizer, self.loader, totals)

    def _evaluate(self, epoch: int, seconds: float, epoch_samples: float) -> None:
        run, task, totals = self.run, self.task, self.totals
        evaluation = run.evaluate(self.model, self.held_out, batch_size=self.eval_batch_size,
                                  loss_fn=task.loss_fn, metrics=task.metrics)
        self.record = {"kind": "epoch", "epoch": epoch, "epochs": self.epochs, "step": run.steps_taken,
                       "train_loss": run.mean(totals["loss_sum"] / max(totals["steps"], 1)).item(),
                       **{f"eval_{name}": evaluation[name] for name in task.metrics},
                       "eval_samples": evaluation["count"], "samples_per_second": epoch_samples / seconds,
                       "epoch_seconds": seconds, "lr": self.optimizer.param_groups[0].get("lr"),
                       "wall_seconds": self.wall()}
        self.reporter.epoch(self.record)

    def finish(self) -> dict:
        """The run's summary (summary.json), written and shown."""
        run, config, record = self.run, self.config, self.record
        rate = self.trained_samples / self.train_seconds
        summary = {
            **run.describe(),
            "workload": self.workload.name,
            "epochs": self.epochs,
            "optimizer_steps": run.steps_taken // run.strategy.grad_accum,
            **({"auto_choice": config.auto_choice} if config.auto_choice else {}),
            "max_steps": config.max_steps,
            "batch_size_per_process": config.batch_size,
            "global_batch_size": self.global_batch,
            "lr": self.lr,
            "seed": config.seed,
            "task": self.task.name,
            **{f"final_{name}": record[f"eval_{name}"] for name in self.task.metrics},
            "final_train_loss": record["train_loss"],
            "eval_samples": record["eval_samples"],
            "train_samples": len(self.train_set),
            "samples_per_second": rate,
            "train_seconds": self.train_seconds,
            **self.utilisation.summary(rate),
            **self.load.summary(),
            "startup_seconds": self.startup_seconds,
            "allocator": described_allocator(),  # the CPU memory allocator the processes ran with
            "allocator_reason": allocator_reason(),  # and why
            # From the user's command, like the start-up time (this process's own time otherwise).
            "wall_seconds": command_age(run.env) or time.perf_counter() - self.started,
            "torch_version": torch.__version__,
            "scaletrain_version": __version__,
            **self.checkpoints.summary(),
        }
        self.reporter.finish(summary)
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


def batch_sizes(config: TrainConfig, train_set, held_out) -> tuple[int, list[str]]:
    """(the held-out batch size, notes) for a user's dataset whose samples may differ in shape
    (sequences of different lengths), before anything trains: training's batches of such
    samples cannot be stacked (refused in one line), and the held-out set is then evaluated one
    sample at a time (said in a note) rather than failing after the first epoch."""
    from ..data.sample_shapes import first_difference

    if not config.dataset:
        return config.eval_batch_size, []
    if config.batch_size > 1:
        found = first_difference(train_set)
        if found:
            raise UsageError(f"--dataset {config.dataset}: its training samples differ in shape ({found}), so batches "
                             f"of {arg('batch_size', config.batch_size)} cannot be stacked; pad or cut them to one "
                             f"length in the dataset, or give {arg('batch_size', 1)}")
    found = first_difference(held_out) if config.eval_batch_size > 1 else None
    if found:
        return 1, [f"the held-out samples of --dataset {config.dataset} differ in shape ({found}): evaluated one at "
                   f"a time, not in batches of {config.eval_batch_size} (pad them to one length to batch them)"]
    return config.eval_batch_size, []
