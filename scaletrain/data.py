"""Sharding data across data-parallel ranks, for training and for evaluation."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def move_to(batch: Any, device: torch.device) -> Any:
    """Moves tensors (possibly nested in tuples, lists, dicts) to the device."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: move_to(v, device) for k, v in batch.items()}
    return batch


class ShardedLoader:
    """A DataLoader over this rank's shard whose order changes every epoch by itself.

    With a plain DistributedSampler, forgetting `sampler.set_epoch(epoch)` silently
    replays the same order every epoch; here each `iter()` advances the epoch.
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, shard: int, num_shards: int, shuffle: bool,
                 drop_last: bool, seed: int, device: torch.device, **loader_kwargs):
        self.sampler = DistributedSampler(dataset, num_replicas=num_shards, rank=shard, shuffle=shuffle,
                                          seed=seed, drop_last=drop_last)
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler, drop_last=drop_last,
                                 pin_memory=device.type == "cuda", **loader_kwargs)
        self.device = device
        self.epoch = 0
        self.batch_size = batch_size

    def set_epoch(self, epoch: int) -> None:
        """Next iteration yields epoch `epoch`'s order (for resuming)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        for batch in self.loader:
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

