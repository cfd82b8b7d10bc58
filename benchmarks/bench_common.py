"""What every benchmark runner shares, so that the libraries compared differ only in how they
run the loop: the same model and data (scaletrain's built-in workloads), the same optimizer,
batch and epochs, and the same way of timing.

Timing: rank 0 notes the wall-clock time at which its first training step finished (the
harness subtracts the time it started the command: "start-up to first step") and the
seconds of every epoch's training loop. Throughput is samples/s over the epochs after the
first (the first is warm-up), so every runner is measured over the same steps.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def timeline(event: str, at: float | None = None) -> None:
    """A milestone of this rank's start-up, where SCALETRAIN_TIMELINE asks for them
    (benchmarks/startup_timeline.py); the first also notes when the rank and its launcher
    (torchrun's agent, the command) started."""
    import os

    if not os.environ.get("SCALETRAIN_TIMELINE"):
        return
    from scaletrain.process.startup_timeline import mark, process_started

    if not getattr(timeline, "started", False):
        timeline.started = True
        mark("rank: process started", process_started())
        if os.environ.get("RANK") == "0":
            mark("command: process started", process_started(os.getppid()))
    mark(event, at)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workload", default="synthetic-cnn")
    p.add_argument("--batch-size", type=int, default=32, help="samples per process per step")
    p.add_argument("--epochs", type=int, default=3, help="the first is warm-up, the rest are timed")
    p.add_argument("--result", type=Path, required=True, help="JSON file rank 0 writes its timings to")
    p.add_argument("--max-steps", type=int, default=0, help="steps per epoch at most (0: all; for smoke tests)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="(raw and scaletrain runners) cuda: one GPU per process, NCCL")
    p.add_argument("--processes", type=int, default=1, help="(Fabric only: it starts the processes itself)")
    p.add_argument("--grad-compression", default="none", help="(scaletrain runners only)")
    p.add_argument("--no-pin", action="store_true",
                   help="(scaletrain API only) leave core affinity to the OS, as the raw loop does")
    return p.parse_args(argv)


def build(workload_name: str, seed: int = 0):
    """(model, train_set, lr) from scaletrain's built-in workload: every runner trains the
    same network on the same samples."""
    from scaletrain.workloads import get_workload

    workload = get_workload(workload_name)
    torch.manual_seed(seed)
    model = workload.build_model()
    train_set, _ = workload.build_datasets(seed)
    return model, train_set, workload.lr


def _wait_for_gpu() -> None:
    """On CUDA a step returns before its kernels ran: time what the GPU has finished."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class Timer:
    """Per-epoch seconds and samples on this rank, plus when the first step ended."""

    def __init__(self, rank: int, world_size: int, max_steps: int = 0):
        self.rank, self.world_size, self.max_steps = rank, world_size, max_steps
        self.first_step_wall = None
        self.epochs: list[tuple[float, int]] = []  # (seconds, samples on this rank)
        self._start = 0.0
        self._samples = self._steps = 0

    def start_epoch(self) -> None:
        _wait_for_gpu()
        self._samples = self._steps = 0
        self._start = time.perf_counter()

    def step(self, samples: int) -> bool:
        """Counts a finished step; False when the epoch should stop (--max-steps reached)."""
        if self.first_step_wall is None:
            _wait_for_gpu()
            self.first_step_wall = time.time()
            timeline("rank: first step done", self.first_step_wall)
        self._samples += samples
        self._steps += 1
        return not (self.max_steps and self._steps >= self.max_steps)

    def end_epoch(self) -> None:
        _wait_for_gpu()
        self.epochs.append((time.perf_counter() - self._start, self._samples))

    def write(self, path: Path, **facts) -> None:
        """Rank 0 writes; samples are counted on rank 0 × world size (equal shards)."""
        if self.rank != 0:
            return
        timed = self.epochs[1:] or self.epochs
        seconds = sum(s for s, _ in timed)
        samples = sum(n for _, n in timed) * self.world_size
        Path(path).write_text(json.dumps({
            "first_step_wall": self.first_step_wall, "samples_per_second": samples / seconds,
            "timed_seconds": seconds, "timed_samples": samples, "world_size": self.world_size,
            "threads": torch.get_num_threads(), **facts}))


def timed_epochs(timer: Timer, loader, epochs: int, step, before_epoch=None) -> torch.Tensor:
    """The loop every runner shares: `step(inputs, targets) -> loss` is the only part that
    differs between libraries. Returns the last loss."""
    loss = None
    for epoch in range(epochs):
        if before_epoch is not None:
            before_epoch(epoch)
        timer.start_epoch()
        for inputs, targets in loader:
            loss = step(inputs, targets)
            if not timer.step(len(targets)):
                break
        timer.end_epoch()
    return loss
