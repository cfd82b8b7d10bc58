"""Sharding training data across data-parallel ranks (evaluation: `scaletrain.data.evaluation`)."""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, Sampler

from ..foundation.errors import UsageError
from .batches import move_to
from .stream_sharding import ShardedStream, agreed


class _ResumableSampler(DistributedSampler):
    """DistributedSampler that can start an epoch part-way, without loading what it skips."""

    skip_samples = 0

    def __iter__(self):
        indices = super().__iter__()
        skip, self.skip_samples = self.skip_samples, 0
        return iter(list(indices)[skip:]) if skip else indices


class _ShareOfSampler(Sampler):
    """Every `num_shards`-th index of the user's own sampler, from `shard` on (the order is
    the user's; its last indices repeat so that every shard has as many)."""

    skip_samples = 0

    def __init__(self, sampler: Sampler, shard: int, num_shards: int):
        try:
            self.total = len(sampler)
        except TypeError:
            raise UsageError("sampler=...: a sampler without a length cannot be shared out among the ranks; give it "
                             "__len__, or make the data an IterableDataset (streams are shared out as they are read)"
                             ) from None
        self.sampler, self.shard, self.num_shards = sampler, shard, num_shards

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return math.ceil(self.total / self.num_shards)

    def __iter__(self):
        indices = list(self.sampler)
        pad = len(self) * self.num_shards - len(indices)
        indices += (indices * (pad // max(len(indices), 1) + 1))[:pad]
        mine = indices[self.shard::self.num_shards]
        skip, self.skip_samples = self.skip_samples, 0
        return iter(mine[skip:])


class ShardedLoader:
    """A DataLoader over this rank's shard whose order changes every epoch by itself.

    With a plain DistributedSampler, forgetting `sampler.set_epoch(epoch)` silently
    replays the same order every epoch; here each `iter()` advances the epoch.

    A map-style dataset is shuffled and shared out by a distributed sampler (or the user's
    own `sampler`, of which each rank takes every N-th index); an IterableDataset is dealt
    out as it is read (see `scaletrain.data.stream_sharding`). `collate_fn` is the user's, for both.
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, shard: int, num_shards: int, shuffle: bool,
                 drop_last: bool, seed: int, device: torch.device, sampler: Optional[Sampler] = None,
                 collate_fn: Optional[Callable] = None, watch: Optional[Callable] = None, **loader_kwargs):
        self.num_shards = num_shards
        self.watch = watch  # the run's hang detection, around the waits for other ranks (streams)
        self.stream = isinstance(dataset, IterableDataset)
        pin = device.type == "cuda"
        if self.stream:
            self.sampler = None
            self.loader = DataLoader(ShardedStream(dataset, batch_size, shard, num_shards, collate_fn, drop_last),
                                     batch_size=None, pin_memory=pin, **loader_kwargs)
        else:
            if sampler is None:
                self.sampler = _ResumableSampler(dataset, num_replicas=num_shards, rank=shard, shuffle=shuffle,
                                                  seed=seed, drop_last=drop_last)
            else:
                self.sampler = _ShareOfSampler(sampler, shard, num_shards)
            self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler, drop_last=drop_last,
                                     pin_memory=pin, collate_fn=collate_fn, **loader_kwargs)
        self.device = device
        self.epoch = 0
        self.batch_size = batch_size
        self._current = 0  # the epoch being read
        self._batches_done = 0  # batches of it handed out
        self._skip = 0  # batches to skip at the next iteration (resume)

    def set_epoch(self, epoch: int) -> None:
        """Next iteration yields epoch `epoch`'s order (for resuming)."""
        self.epoch = epoch
        self._skip = 0

    def position(self) -> dict:
        """Where the data stands, for a checkpoint: the epoch being read (or the next one)
        and the batches of it already handed out, also as samples across all shards so that a
        run resumed on another number of processes can skip the same share of the data."""
        num_shards = self.num_shards
        return {"epoch": self._current, "batches_done": self._batches_done,
                "samples_done": self._batches_done * self.batch_size * num_shards,
                "num_shards": num_shards, "batch_size": self.batch_size}

    def resume_at(self, position: dict) -> None:
        """The next iteration continues `position`: same epoch, already-read batches skipped.
        On another number of shards the skip is converted through samples (the order within
        the epoch differs there anyway, since the sampler deals samples out per shard)."""
        num_shards = self.num_shards
        if position.get("num_shards") == num_shards and position.get("batch_size") == self.batch_size:
            skip = position["batches_done"]
        else:
            skip = round(position["samples_done"] / (self.batch_size * num_shards))
        self.epoch = self._current = position["epoch"]
        self._skip = self._batches_done = skip if self.stream else min(skip, len(self.loader))

    def __len__(self) -> int:
        if self.stream:
            raise TypeError("a stream (IterableDataset) has no length: its batches are counted as they come")
        return len(self.loader)

    def __iter__(self):
        if self.sampler is not None:
            self.sampler.set_epoch(self.epoch)
        self._current, self._batches_done = self.epoch, self._skip
        self.epoch += 1
        skip, self._skip = self._skip, 0
        if self.stream:
            yield from self._stream(skip)
            return
        self.sampler.skip_samples = skip * self.batch_size  # skipped without loading them
        if skip:
            # A resumed epoch: the uninterrupted run drew a seed from the global RNG when this
            # epoch's iterator started, before the checkpoint captured the RNG; drawing it
            # again now would shift every later random number, so draw it off the record.
            with torch.random.fork_rng(devices=[]):
                batches = iter(self.loader)
        else:
            batches = iter(self.loader)
        for batch in batches:
            self._batches_done += 1
            yield move_to(batch, self.device)

    def _stream(self, skip: int):
        """A stream's batches, while every rank has one (streams.agreed); on a resume, the
        ones already used are read and passed over (a stream can only be skipped by reading it)."""
        for number, batch in enumerate(agreed(iter(self.loader), self.watch)):
            if number < skip:
                continue
            self._batches_done += 1
            yield move_to(batch, self.device)

