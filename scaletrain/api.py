"""The public library API: `scaletrain.init()` and the `Run` it returns.

    run = scaletrain.init(strategy="ddp")
    model, optimizer = run.setup(model, optimizer)
    loader = run.loader(dataset, batch_size=32, shuffle=True)
    for epoch in range(epochs):
        for inputs, targets in loader:
            loss = run.train_step(model, optimizer, inputs, targets, loss_fn)
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
from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from . import process_group
from .checkpoint import DEFAULT_KEEP, Checkpointer
from .backends import choose_backend
from .data import ShardedLoader, eval_loader, move_to
from .environment import DistEnv, detect
from .devices import choose_device, pin_cores, threads_per_process
from .fault.durations import as_seconds
from .fault.start import backstop_timeout, start_watchdog
from .strategies import Strategy, get_strategy


def seed_everything(seed: int) -> None:
    """Same seed on every rank: every replica starts from the same initial weights."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class Run:
    """One process's view of a distributed training run."""

    def __init__(self, env: DistEnv, strategy: Strategy, device: torch.device, backend: str,
                 threads: int, owns_group: bool, seed: int):
        self.env = env
        self.strategy = strategy
        self.device = device
        self.backend = backend
        self.threads = threads
        self.seed = seed
        self._owns_group = owns_group
        self._closed = False
        self._micro_step = 0  # position inside a gradient-accumulation cycle
        self.started = time.perf_counter()
        self.steps_taken = 0  # train_step calls so far (restored by load_checkpoint)
        self._watchdog = None  # hang detection, when there are peers to wait for
        self.cores: Optional[list[int]] = None  # the cores this process was pinned to, if any

    # -- who am I -----------------------------------------------------------------------
    rank = property(lambda self: self.env.rank)
    local_rank = property(lambda self: self.env.local_rank)
    world_size = property(lambda self: self.env.world_size)
    local_world_size = property(lambda self: self.env.local_world_size)
    node_rank = property(lambda self: self.env.node_rank)
    nnodes = property(lambda self: self.env.nnodes)
    is_main = property(lambda self: self.env.rank == 0)

    @property
    def data_parallel_rank(self) -> int:
        return self.strategy.data_parallel(self)[0]

    @property
    def data_parallel_size(self) -> int:
        return self.strategy.data_parallel(self)[1]

    # -- model and data -----------------------------------------------------------------
    def setup(self, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None):
        """Places and wraps the model (and optimizer) for the strategy.
        Returns (model, optimizer), or just the model when no optimizer is given."""
        wrapped, opt = self.strategy.setup(self, model, optimizer)
        return wrapped if optimizer is None else (wrapped, opt)

    def loader(self, dataset, batch_size: int, shuffle: bool = True, drop_last: bool = False,
               seed: Optional[int] = None, **loader_kwargs) -> ShardedLoader:
        """A loader over this rank's shard; `batch_size` is per process. Batches arrive on
        `run.device`, and every pass over the loader is a new epoch with a new order."""
        rank, size = self.strategy.data_parallel(self)
        drop_last = drop_last or self.strategy.whole_batches_only(self)
        return ShardedLoader(dataset, batch_size, shard=rank, num_shards=size, shuffle=shuffle,
                             drop_last=drop_last, seed=self.seed if seed is None else seed,
                             device=self.device, **loader_kwargs)

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, inputs, targets,
                   loss_fn: Callable = F.cross_entropy) -> torch.Tensor:
        """zero_grad, forward, backward (gradients synchronised), optimizer step.
        Returns the loss as a detached tensor: no host synchronisation in the hot loop.

        With `grad_accum=N` a call is one micro-step: the optimizer steps on every N-th call,
        the N-1 before it accumulate gradients without synchronising them (each loss scaled
        by 1/N), so N calls on batches of B equal one step on a batch of N*B."""
        accum = self.strategy.grad_accum
        with self._op("train step"):
            if self._micro_step == 0:
                optimizer.zero_grad(set_to_none=True)
            last = self._micro_step == accum - 1
            with contextlib.nullcontext() if last else self.strategy.no_sync(model):
                loss = self.forward_backward(model, inputs, targets, loss_fn, scale=1.0 / accum)
            if last:
                optimizer.step()
            self._micro_step = (self._micro_step + 1) % accum
        self.steps_taken += 1
        if self._watchdog is not None:
            self._watchdog.step = self.steps_taken
        return loss

    def forward_backward(self, model: nn.Module, inputs, targets, loss_fn: Callable = F.cross_entropy,
                         scale: float = 1.0) -> torch.Tensor:
        """Forward and backward only (gradients synchronised unless inside `no_sync`): the
        middle of `train_step`, for loops that time or accumulate the parts themselves."""
        return self.strategy.forward_backward(self, model, inputs, targets, loss_fn, scale)

    def no_sync(self, model: nn.Module):
        """Context for gradient accumulation: backward inside it does not communicate;
        the first backward outside it synchronises everything accumulated."""
        return self.strategy.no_sync(model)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module inside whatever wrapper the strategy added."""
        return self.strategy.unwrap(model)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dataset, batch_size: int = 256,
                 loss_fn: Callable = F.cross_entropy) -> dict:
        """Loss and accuracy over `dataset`, each sample counted exactly once whatever the
        world size. Every rank must call it. `loss_fn` must accept `reduction="none"`."""
        with self._op("evaluate"):
            return self._evaluate(model, dataset, batch_size, loss_fn)

    def _evaluate(self, model, dataset, batch_size, loss_fn) -> dict:
        rank, size = self.strategy.data_parallel(self)
        was_training = model.training
        model.eval()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, correct, count
        for inputs, targets, real in eval_loader(dataset, batch_size, rank, size, self.device):
            inputs, targets, real = move_to((inputs, targets, real), self.device)
            logits = self.strategy.predict(self, model, inputs)
            if logits is None:  # a process that does not hold the model's output
                continue
            real = real.to(torch.float64)
            losses = loss_fn(logits.float(), targets, reduction="none").to(torch.float64)
            totals[0] += (losses * real).sum()
            totals[1] += ((logits.argmax(dim=-1) == targets).to(torch.float64) * real).sum()
            totals[2] += real.sum()
        model.train(was_training)
        totals = self._all_reduce(totals)
        count = int(totals[2].item())
        return {"loss": totals[0].item() / max(count, 1), "accuracy": totals[1].item() / max(count, 1),
                "count": count}

    # -- communication helpers ----------------------------------------------------------
    def watch(self, name: str):
        """Context for a blocking operation of your own (a collective, a wait on peers): if
        it outlasts the timeout while a peer is silent or elsewhere, that peer is named and
        this process exits (see docs/fault-tolerance.md). train_step, evaluate, sum, mean,
        barrier and checkpoints are watched already."""
        return self._watchdog.op(name) if self._watchdog is not None else contextlib.nullcontext()

    _op = watch

    def _all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        if dist.is_initialized() and dist.get_world_size() > 1:
            with self._op("all-reduce"):
                dist.all_reduce(tensor, op=op)
        return tensor

    def _as_tensor(self, value) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value.detach().to(self.device, torch.float64).clone()
        return torch.tensor(value, dtype=torch.float64, device=self.device)

    def sum(self, value) -> float | torch.Tensor:
        """Sum of `value` over all ranks (a float in, a float out; a tensor in, a tensor out)."""
        out = self._all_reduce(self._as_tensor(value))
        return out if isinstance(value, torch.Tensor) else out.item()

    def mean(self, value) -> float | torch.Tensor:
        """Average of a metric across the processes that hold the model's outputs, e.g.
        `run.mean(loss)`: every rank, except under pipeline, where only last stages have a loss."""
        mine = self._as_tensor(value)
        if not self.strategy.holds_outputs(self):
            mine = torch.zeros_like(mine)
        out = self._all_reduce(mine) / self.strategy.output_holders(self)
        return out if isinstance(value, torch.Tensor) else out.item()

    def barrier(self) -> None:
        if dist.is_initialized() and dist.get_world_size() > 1:
            with self._op("barrier"):
                dist.barrier()

    # -- checkpoints --------------------------------------------------------------------
    def checkpointer(self, directory, keep: int = DEFAULT_KEEP) -> Checkpointer:
        """A Checkpointer writing into `directory` (keeps the newest `keep` checkpoints)."""
        return Checkpointer(self, Path(directory), keep)

    def save_checkpoint(self, directory, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
                        step: Optional[int] = None, scheduler=None, loader=None, extra: Optional[dict] = None,
                        keep: int = DEFAULT_KEEP) -> Path:
        """Saves model, optimizer, schedule, loader position, every rank's RNG state and the
        step into `directory`/step-N atomically. Every rank must call it; rank 0 writes."""
        return self.checkpointer(directory, keep).save(self.steps_taken if step is None else step, model,
                                                       optimizer, scheduler=scheduler, loader=loader, extra=extra)

    def load_checkpoint(self, source, model: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
                        scheduler=None, loader=None) -> Optional[dict]:
        """Restores what save_checkpoint saved, on any world size; `source` is a checkpoint
        folder, a folder of them (the newest complete one is used) or a run's output folder.
        Returns {"path", "step", "loader", "extra", "world_size"}. Every rank must call it."""
        return Checkpointer(self, Path(source)).load(Path(source), model, optimizer, scheduler=scheduler,
                                                     loader=loader)

    def print(self, *args, **kwargs) -> None:
        """print() on rank 0 only, so N processes do not print N copies."""
        if self.is_main:
            print(*args, **kwargs, flush=True)

    # -- lifetime -----------------------------------------------------------------------
    def describe(self) -> dict:
        """Facts about this run for summary.json. Every rank must call it: it gathers each
        process's memory of parameters, gradients and optimizer state."""
        rank, size = self.strategy.data_parallel(self)
        facts = {"strategy": self.strategy.name, "backend": self.backend, "device": str(self.device),
                 "world_size": self.world_size, "nnodes": self.nnodes,
                 "nproc_per_node": self.local_world_size, "launcher": self.env.launcher,
                 "threads_per_process": self.threads, "data_parallel_size": size,
                 "pinned_cores": self.cores}
        facts.update(self.strategy.describe(self))
        return facts

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._watchdog is not None:
                self._watchdog.stop()
            # Gloo's worker threads free a finished collective's tensors and need the GIL to
            # do it, while destroying the group (or, later, DDP's reducer) joins them with the
            # GIL held: a deadlock at exit in torch 2.13 (pytorch/pytorch#75097). Moments
            # without the GIL, before and after, let the workers finish first.
            time.sleep(0.05)
            process_group.destroy_process_group(self._owns_group)
            time.sleep(0.05)

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Run(strategy={self.strategy.name!r}, rank={self.rank}, world_size={self.world_size}, "
                f"device={str(self.device)!r}, backend={self.backend!r})")


def init(strategy: str | Strategy = "ddp", *, backend: Optional[str] = None, device: Optional[str] = None,
         threads: Optional[int] = None, seed: Optional[int] = 0, timeout: float | timedelta | None = None,
         environ: Optional[Mapping[str, str]] = None, pin: bool = True, **strategy_options: Any) -> Run:
    """Detects the environment, sets up the process group, device, backend and threads.

    Without a launcher this is one process (rank 0 of 1); under torchrun, mpirun, srun or
    `scaletrain launch` it joins the job. `seed` is applied on every rank (None: leave the
    random state alone). `pin`: bind each of a node's processes to its own cores (see
    `devices.pin_cores`); False leaves the affinity to the operating system. `timeout`: how
    long a rank waits for its peers (seconds, or a timedelta; default 10 minutes)."""
    timeout = timedelta(seconds=as_seconds(timeout)) if timeout is not None else process_group.DEFAULT_TIMEOUT
    env = detect(os.environ if environ is None else environ)
    strat = get_strategy(strategy, **strategy_options)
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
    run = Run(env, strat, dev, chosen_backend, n_threads, owns_group=False, seed=seed or 0)
    run.cores = cores
    strat.validate(run)  # before joining: a doomed run should not make its peers wait
    run._owns_group = process_group.init_process_group(env, chosen_backend, dev, backstop_timeout(timeout))
    run._watchdog = start_watchdog(env, timeout)
    return run
