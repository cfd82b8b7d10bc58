"""Sharding a stream (an `IterableDataset`, which has no length and no indices) across
data-parallel ranks and DataLoader workers.

Every rank reads the same stream in the same order (the dataset must yield the same
samples on every rank: seed any shuffling it does) and keeps its own share. The stream is
dealt in rounds of one global batch (batch size × ranks samples): rank r takes the r-th
batch-sized slice of each round, and the rounds go to the DataLoader's workers in turn.
So each sample is used by exactly one rank and one worker per epoch, and every rank gets
the same number of batches — a rank with one batch more than its peers would wait forever
in that batch's gradient synchronisation.

A stream that is not the same on every rank (one rank's copy yields 200 samples, another's
120) would leave a rank with a batch its peers do not have, waiting in that batch's
gradient synchronisation until the backend aborts. So the ranks agree, batch by batch,
that each has the next one (`Agreement`: one small all-reduce, started a batch ahead so
that it runs while the current batch trains), and when some have run out and others have
not, all of them stop with one line naming the uneven stream.

The stream's last, incomplete round is not dropped: its samples are shared out evenly and
appended to the last full round's batches (those batches are slightly larger), so every
sample counts. A stream too short for one sample per rank is refused.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data.dataloader import default_collate

from ..foundation.errors import UsageError


def deal(stream: Iterator[Any], batch_size: int, shard: int, num_shards: int, worker: int = 0,
         num_workers: int = 1, drop_tail: bool = False) -> Iterator[list]:
    """This (shard, worker)'s batches of samples from `stream`, by the rules above;
    `drop_tail`: every batch has exactly `batch_size` samples (a pipeline's micro-batches
    must be equal), the incomplete last round is left out."""
    round_size = batch_size * num_shards
    lo, hi = shard * batch_size, (shard + 1) * batch_size
    pending: Optional[list] = None  # the last full round seen, held back until we know if it is the last
    pending_index = -1
    current: list = []
    rounds = 0
    for sample in stream:
        current.append(sample)
        if len(current) == round_size:
            if pending is not None and pending_index % num_workers == worker:
                yield pending[lo:hi]
            pending, pending_index, current = current, rounds, []
            rounds += 1
    if drop_tail:
        current = []
        if pending is None:
            raise UsageError(f"the dataset yielded fewer than one global batch ({round_size} samples: batch size "
                             f"{batch_size} × {num_shards} ranks); give it more data or a smaller batch size")
    if pending is None and len(current) < num_shards:
        raise UsageError(f"the dataset yielded {len(current)} sample(s), fewer than the {num_shards} data-parallel "
                         "ranks; give it more data or use fewer processes")
    if pending is None:  # one short round only: share it out
        if worker == 0:
            yield _even_share(current, shard, num_shards)
        return
    if pending_index % num_workers == worker:
        yield pending[lo:hi] + _even_share(current, shard, num_shards)


def _even_share(samples: list, shard: int, num_shards: int) -> list:
    """Shard `shard`'s contiguous part of `samples` split as evenly as possible."""
    base, extra = divmod(len(samples), num_shards)
    start = shard * base + min(shard, extra)
    return samples[start:start + base + (shard < extra)]


class ShardedStream(IterableDataset):
    """A stream's batches for one rank, collated; each DataLoader worker yields its rounds."""

    def __init__(self, dataset: IterableDataset, batch_size: int, shard: int, num_shards: int,
                 collate_fn: Optional[Callable] = None, drop_tail: bool = False):
        self.dataset, self.batch_size, self.drop_tail = dataset, batch_size, drop_tail
        self.shard, self.num_shards = shard, num_shards
        self.collate_fn = collate_fn or default_collate

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for samples in deal(iter(self.dataset), self.batch_size, self.shard, self.num_shards, worker, workers,
                            self.drop_tail):
            yield self.collate_fn(samples)



class UnevenStream(UsageError):
    """Some ranks' streams ended before the others': every rank finds it at the same batch."""

    same_on_every_rank = True


class Agreement:
    """Whether every rank has its next batch, agreed among all ranks (every rank takes the
    same number of steps). `start(has_next)` begins the all-reduce; `result()` waits for
    it: (every rank has one, some rank has one). Over Gloo (the job's own group when it is
    Gloo, else a Gloo group made for it), on the CPU: no device synchronisation."""

    _group_of: dict = {}

    def __init__(self) -> None:
        self.active = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        self._work = self._flags = None

    def _group(self):
        if dist.get_backend() == "gloo":
            return None  # the job's own group
        key = id(dist.group.WORLD)
        if key not in Agreement._group_of:  # collective: every rank reads its stream alike
            Agreement._group_of[key] = dist.new_group(backend="gloo")
        return Agreement._group_of[key]

    def start(self, has_next: bool) -> None:
        self._flags = torch.tensor([float(has_next), -float(has_next)])
        if self.active:
            self._work = dist.all_reduce(self._flags, op=dist.ReduceOp.MIN, group=self._group(), async_op=True)

    def result(self) -> tuple[bool, bool]:
        if self._work is not None:
            self._work.wait()
            self._work = None
        every, anyone = self._flags.tolist()
        return every > 0, -anyone > 0


def agreed(batches: Iterator[Any], watch: Optional[Callable] = None) -> Iterator[Any]:
    """`batches`, for as long as every rank has its next one (see Agreement). `watch(name)`:
    the run's hang detection, around the wait for the other ranks' answer (a rank whose
    stream stalls is then named, like one that stalls in a step)."""
    agreement = Agreement()
    end = object()
    upcoming = next(batches, end)
    agreement.start(upcoming is not end)
    handed = 0
    while True:
        with watch("reading the next batch") if watch is not None else contextlib.nullcontext():
            every, anyone = agreement.result()
        if not every:
            if anyone:
                raise UnevenStream(
                    f"the IterableDataset ended after {handed} batch(es) on some ranks but went on on others: a "
                    "stream must yield the same samples in the same order on every rank (seed any shuffling it "
                    "does, read the same files), or it leaves ranks waiting for each other")
            return
        batch = upcoming
        upcoming = next(batches, end)
        agreement.start(upcoming is not end)  # runs while `batch` trains
        handed += 1
        yield batch
