"""Sharding data across data-parallel ranks, for training and for evaluation."""

from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .batches import move_to


class _ResumableSampler(DistributedSampler):
    """DistributedSampler that can start an epoch part-way, without loading what it skips."""

    skip_samples = 0

    def __iter__(self):
        indices = super().__iter__()
        skip, self.skip_samples = self.skip_samples, 0
        return iter(list(indices)[skip:]) if skip else indices


class ShardedLoader:
    """A DataLoader over this rank's shard whose order changes every epoch by itself.

    With a plain DistributedSampler, forgetting `sampler.set_epoch(epoch)` silently
    replays the same order every epoch; here each `iter()` advances the epoch.
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, shard: int, num_shards: int, shuffle: bool,
                 drop_last: bool, seed: int, device: torch.device, **loader_kwargs):
        self.sampler = _ResumableSampler(dataset, num_replicas=num_shards, rank=shard, shuffle=shuffle,
                                          seed=seed, drop_last=drop_last)
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler, drop_last=drop_last,
                                 pin_memory=device.type == "cuda", **loader_kwargs)
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
        num_shards = self.sampler.num_replicas
        return {"epoch": self._current, "batches_done": self._batches_done,
                "samples_done": self._batches_done * self.batch_size * num_shards,
                "num_shards": num_shards, "batch_size": self.batch_size}

    def resume_at(self, position: dict) -> None:
        """The next iteration continues `position`: same epoch, already-read batches skipped.
        On another number of shards the skip is converted through samples (the order within
        the epoch differs there anyway, since the sampler deals samples out per shard)."""
        num_shards = self.sampler.num_replicas
        if position.get("num_shards") == num_shards and position.get("batch_size") == self.batch_size:
            skip = position["batches_done"]
        else:
            skip = round(position["samples_done"] / (self.batch_size * num_shards))
        self.epoch = self._current = position["epoch"]
        self._skip = self._batches_done = min(skip, len(self.loader))

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.sampler.set_epoch(self.epoch)
        self._current, self._batches_done = self.epoch, self._skip
        self.epoch += 1
        skip, self._skip = self._skip, 0
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


class EvalShard(Dataset):
    """This rank's contiguous share of an evaluation set, padded so every rank has the same
    number of items (collective strategies such as FSDP need every rank in every forward).

    Each item is (inputs, target, real): padding repeats earlier samples with real=False so
    that it never reaches the metrics and every held-out sample counts exactly once.
    """

    def __init__(self, dataset: Dataset, shard: int, num_shards: int):
        self.dataset = dataset
        self.total = len(dataset)
        self.per_shard = math.ceil(self.total / num_shards) if self.total else 0
        self.start = shard * self.per_shard

    def __len__(self) -> int:
        return self.per_shard

    def __getitem__(self, i: int):
        position = self.start + i
        inputs, target = self.dataset[position % self.total]
        return inputs, target, position < self.total


def eval_loader(dataset: Dataset, batch_size: int, shard: int, num_shards: int,
                device: torch.device, **loader_kwargs) -> DataLoader:
    shard_ds = EvalShard(dataset, shard, num_shards)
    return DataLoader(shard_ds, batch_size=batch_size, shuffle=False, **loader_kwargs)

