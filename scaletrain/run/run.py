"""`Run`: one process's view of a distributed training run, as `scaletrain.init` returns it.

A Run is complete when it is constructed: `init` resolves the environment, the strategy, the
device, the backend, the threads, the process group, hang detection, the memory meter and the
trackers first, and hands them all over. What a Run does is in the class (who it is, its
topology, setting models up, loaders, evaluation) and in its facets, each a module of its own:
the step loop's calls (run/step_loop.py), building a model on the meta device
(run/meta_build.py), collectives (run/collectives.py), checkpoints (run/checkpoints.py),
records — trackers and printing — (run/records.py), memory (run/memory.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Optional

import torch
from torch import nn

from ..checkpoint.background import BackgroundSaves
from ..data import evaluation
from ..data.loaders import ShardedLoader
from ..fault.watchdog import Watchdog
from ..foundation.errors import UsageError
from ..memory.meter import MemoryMeter
from ..parallel import ModelPart, Prepared, Topology
from ..parallel.precision import LossScaler
from ..process import process_group
from ..process.environment import DistEnv
from ..process.process_context import ProcessContext
from ..strategies import Strategy
from ..track import Trackers
from .checkpoints import RunCheckpoints
from .collectives import RunCollectives
from .gc_schedule import GcSchedule
from .memory import RunMemory
from .meta_build import RunMetaBuild
from .records import RunRecords
from .step_loop import RunStepLoop


class Run(RunStepLoop, RunMetaBuild, RunCollectives, RunCheckpoints, RunRecords, RunMemory):
    """One process's view of a distributed training run, complete from its construction
    (`init` resolves everything first): who it is, its topology, setting models up, loaders and
    evaluation, and its facets — the step loop's calls, meta-device builds, collectives,
    checkpoints, records (trackers, printing), memory — each in a module of its own."""

    def __init__(self, env: DistEnv, strategy: Strategy, ctx: ProcessContext, topology: Topology, seed: int, *,
                 owns_group: bool, cores: Optional[list[int]], watchdog: Optional[Watchdog], memory: MemoryMeter,
                 trackers: Trackers, background_saves: Optional[BackgroundSaves] = None):
        self.env = env
        self.strategy = strategy
        self.ctx = ctx
        #: The run's parallel dimensions and device mesh: every topology question is its.
        self.topology = topology
        self.seed = seed
        self._owns_group = owns_group
        #: The cores this process was pinned to, if any.
        self.cores = cores
        self._watchdog = watchdog  # hang detection, when there are peers to wait for
        #: This process's memory: baseline (the process, torch and its group, no model yet), peak.
        self.memory = memory
        #: Rank 0's experiment trackers (init(trackers=...)).
        self.trackers = trackers
        #: The one checkpoint written in the background, if any (run/checkpoints.py).
        self.background_saves = background_saves if background_saves is not None else BackgroundSaves()
        self._closed = False
        self._micro_step = 0  # position inside a gradient-accumulation cycle
        self._prepared: dict[int, Prepared] = {}  # id(what setup returned) -> its prepared state
        self.started = time.perf_counter()
        self.steps_taken = 0  # train_step calls so far (restored by load_checkpoint)
        # fp16's loss scaling; where processes hold different gradients, they agree on overflow.
        self.scaler = LossScaler(strategy.precision, ctx.device, topology.gradients_differ)
        self._meta_rng: Optional[torch.Tensor] = None  # the random state a meta-device build started from
        self._meta_built = None  # what that build did to every tensor (parallel/init_trace.py)
        #: Python's garbage collector, frozen after setup and run every `gc_every` steps.
        self.collector = GcSchedule(getattr(strategy.options, "gc_every", 0))

    # -- who am I -----------------------------------------------------------------------
    rank = property(lambda self: self.ctx.rank)
    local_rank = property(lambda self: self.ctx.local_rank)
    world_size = property(lambda self: self.ctx.world_size)
    local_world_size = property(lambda self: self.ctx.local_world_size)
    node_rank = property(lambda self: self.ctx.node_rank)
    nnodes = property(lambda self: self.ctx.nnodes)
    device = property(lambda self: self.ctx.device)
    backend = property(lambda self: self.ctx.backend)
    threads = property(lambda self: self.ctx.threads)
    is_main = property(lambda self: self.ctx.rank == 0)

    @property
    def data_parallel_rank(self) -> int:
        """Which data-parallel shard of every global batch this process reads."""
        return self.topology.dp_rank

    @property
    def data_parallel_size(self) -> int:
        """How many different batches one optimizer step sees (replicas × shards)."""
        return self.topology.dp_size

    @property
    def mesh(self):
        """The DeviceMesh of the run, its dimensions named as scaletrain.parallel.dims.MESH_DIMS."""
        return self.topology.mesh

    # -- model and data -----------------------------------------------------------------
    def setup(self, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, scheduler: Any = None, *,
              init_fn: Optional[Callable[[nn.Module], None]] = None):
        """Places and wraps the model for the strategy and points the optimizer (your own
        object, changed in place) at the parameters this process trains, so a scheduler
        bound to it keeps driving it. Returns the model; (model, optimizer) when an
        optimizer is given; (model, optimizer, scheduler) when a scheduler is given too.
        Call it once per model (a GAN's generator and discriminator: twice).

        A model built inside `run.meta_device()` holds no memory yet: it is parallelised
        first, then each process materialises and initialises only its own share, with the
        weights an ordinary build would have had (each module's `reset_parameters`, a Hugging
        Face model's `_init_weights`; or `init_fn(module)`, called on every module)."""
        if any(model is p.model or model is p.module for p in self._prepared.values()):
            raise UsageError("run.setup was already called on this model: call it once per model and keep using "
                             "what it returned (model, optimizer = run.setup(model, optimizer))")
        if init_fn is None and (why := self.meta_init_difference(model)):
            raise UsageError(f"the model built in run.meta_device() would not start from the weights of an ordinary "
                             f"build: {why}; build it on a real device (outside run.meta_device()), or pass "
                             "init_fn=fn(module) to run.setup to initialise it your way")
        with self.watch("setup"):  # DDP's and FSDP's construction are collectives: a late peer is named
            prepared = self.strategy.setup(self.topology, model, optimizer, meta_rng=self._meta_rng, init_fn=init_fn)
        self.scaler.sharded = self.topology.gradients_differ  # a strategy may settle its dimensions here (auto)
        self._prepared[id(prepared.model)] = prepared
        for line in prepared.banner:
            self.print(f"scaletrain: {line}")
        self.collector.start()
        if scheduler is not None:
            if getattr(scheduler, "optimizer", prepared.optimizer) is not prepared.optimizer:
                scheduler.optimizer = prepared.optimizer  # drive the optimizer that really steps
            return prepared.model, prepared.optimizer, scheduler
        return prepared.model if optimizer is None else (prepared.model, prepared.optimizer)

    def prepared(self, model: nn.Module, training: bool = True) -> Prepared:
        """The strategy's per-run state for a model that `setup` returned. A model never
        given to `setup` is used as it is: evaluated, or trained by one process; several
        processes train it only when it synchronises itself (your own DDP or FSDP wrapper),
        since nothing else would keep their copies equal."""
        found = self._prepared.get(id(model))
        if found is not None:
            return found
        if any(p.module is model and p.model is not model for p in self._prepared.values()):
            raise UsageError("this is the model you gave run.setup, not the one it returned: pass the returned "
                             "model (model, optimizer = run.setup(model, optimizer)), or its gradients are not "
                             "synchronised")
        if training and self.world_size > 1 and not _synchronises_itself(model):
            raise UsageError(f"this model was never given to run.setup, so its gradients would not be synchronised "
                             f"and the {self.world_size} processes would train {self.world_size} different models; "
                             "prepare it first: model, optimizer = run.setup(model, optimizer)")
        config = self.strategy.configuration(self.world_size, self.local_world_size)
        return Prepared(config, self.topology, ModelPart(module=model, model=model), None)

    def loader(self, dataset, batch_size: int, shuffle: bool = True, drop_last: bool = False,
               seed: Optional[int] = None, **loader_kwargs) -> ShardedLoader:
        """A loader over this rank's shard; `batch_size` is per process. Batches arrive on
        `run.device`, and every pass over the loader is a new epoch with a new order.

        `dataset`: map-style (shuffled and shared out by a distributed sampler, or by your
        own `sampler=`, of which each rank takes every N-th index), or an IterableDataset
        (a stream: dealt out as it is read, each sample to one rank and one worker per
        epoch; it must yield the same samples in the same order on every rank).
        `collate_fn`, `num_workers` and DataLoader's other arguments pass through."""
        drop_last = drop_last or self.strategy.whole_batches_only()
        return ShardedLoader(dataset, batch_size, shard=self.data_parallel_rank, num_shards=self.data_parallel_size,
                             shuffle=shuffle,
                             drop_last=drop_last, seed=self.seed if seed is None else seed,
                             device=self.device, watch=self.watch, **loader_kwargs)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module inside whatever wrapper the strategy added (a pipeline stage:
        this process's part of it)."""
        found = self._prepared.get(id(model))
        return found.module if found is not None and found.model is not found.module else getattr(model, "module", model)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dataset, batch_size: int = 256, loss_fn: Optional[Callable] = None,
                 metrics: Any = None, collate_fn: Optional[Callable] = None, **loader_kwargs) -> dict:
        """Metrics over `dataset` (map-style or an IterableDataset, batches of any form the
        model takes), each sample counted exactly once whatever the world size; returns
        {name: value, ..., "count": samples}. Every rank must call it.

        `metrics`: names among "loss", "accuracy", "perplexity", functions
        `fn(output, batch) -> number` (a batch's mean), or a mapping name -> either; by
        default the loss, and the accuracy when the model is a classifier (a tensor of
        logits, integer targets). The loss is `loss_fn(output, targets...)` (a mean over the
        batch) when given, else the model's own `output.loss`."""
        self.memory.snapshot()  # the training peak so far; evaluation's own is not training's
        try:
            with self.watch("evaluate"):
                return evaluation.evaluate(self.prepared(model, training=False), dataset, batch_size=batch_size,
                                           loss_fn=loss_fn,
                                           metrics=metrics, collate_fn=collate_fn, shard=self.data_parallel_rank,
                                           num_shards=self.data_parallel_size, device=self.device,
                                           all_reduce=self._all_reduce, reports=self.topology.reports_outputs,
                                           loader_kwargs=loader_kwargs)
        finally:
            self.memory.reset_peak()

    # -- communication helpers ----------------------------------------------------------
    def watch(self, name: str, nbytes: Optional[int] = None):
        """Context for a blocking operation of your own (a collective, a wait on peers): if
        it outlasts the timeout while a peer is silent or elsewhere, that peer is named, every
        rank's stacks and last collectives are written into the run's folder, and this process
        exits (see docs/fault-tolerance.md). `nbytes`: what it carries, for that record.
        train_step, evaluate, sum, mean, barrier and checkpoints are watched already."""
        return self._watchdog.op(name, nbytes) if self._watchdog is not None else contextlib.nullcontext()

    # -- lifetime -----------------------------------------------------------------------
    def describe(self) -> dict:
        """Facts about this run for summary.json. Every rank must call it: it gathers each
        process's memory of parameters, gradients and optimizer state."""
        facts = {"strategy": self.strategy.name, "backend": self.backend, "device": str(self.device),
                 "world_size": self.world_size, "nnodes": self.nnodes,
                 "nproc_per_node": self.local_world_size, "launcher": self.env.launcher,
                 "threads_per_process": self.threads, "data_parallel_size": self.data_parallel_size,
                 "pinned_cores": self.cores}
        facts.update(self.strategy.describe(self.topology))
        facts.update(self._memory_per_rank())
        for prepared in self._prepared.values():
            facts.update(prepared.describe())
        return facts

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.collector.stop()
            self.trackers.finish()  # flushed and closed even when the loop did not finish them
            self._finish_background_save()
            if self._watchdog is not None:
                self._watchdog.stop()
            # Gloo's workers need the GIL to free a finished collective's tensors, while destroying
            # the group (or, later, DDP's reducer) joins them with the GIL held: a deadlock at exit
            # in torch 2.13 (pytorch/pytorch#75097). Moments without the GIL let them finish first.
            time.sleep(0.05)
            process_group.destroy_process_group(self._owns_group)
            time.sleep(0.05)

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - where an error ended the block, it is the one to report
            if exc is None:
                raise

    def __repr__(self) -> str:
        return (f"Run(strategy={self.strategy.name!r}, rank={self.rank}, world_size={self.world_size}, "
                f"device={str(self.device)!r}, backend={self.backend!r})")


def _synchronises_itself(model: nn.Module) -> bool:
    """A model the user wrapped for data parallelism: DDP, FSDP, or parameters that are DTensors."""
    names = {cls.__name__ for cls in type(model).__mro__}
    return bool(names & {"DistributedDataParallel", "FSDPModule", "FullyShardedDataParallel"}) or any(
        type(p).__name__ == "DTensor" for p in model.parameters())
