"""Sharding a stream (an `IterableDataset`, which has no length and no indices) across
data-parallel ranks and DataLoader workers.

Every rank reads the same stream in the same order (the dataset must yield the same
samples on every rank: seed any shuffling it does) and keeps its own share. The stream is
dealt in rounds of one global batch (batch size × ranks samples): rank r takes the r-th
batch-sized slice of each round, and the rounds go to the DataLoader's workers in turn.
So each sample is used by exactly one rank and one worker per epoch, and every rank gets
the same number of batches — a rank with one batch more than its peers would wait forever
in that batch's gradient synchronisation.

The stream's last, incomplete round is not dropped: its samples are shared out evenly and
appended to the last full round's batches (those batches are slightly larger), so every
sample counts. A stream too short for one sample per rank is refused.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data.dataloader import default_collate

from .errors import UsageError


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

