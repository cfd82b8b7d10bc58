"""Evaluation over a held-out set on every rank at once: each sample counted exactly once,
whatever the world size, with the metrics the user asks for.

Each data-parallel rank takes a contiguous share of the set. Every rank runs the same
number of forwards (FSDP's forwards are collective, so a rank with one batch less would
leave its peers waiting); a rank whose share has run out runs a one-sample batch that
counts for nothing. Batches hold real samples only, so a batch's mean (a model's own loss,
a metric function's value) is a mean over real samples, weighted by their number.

Metrics: "loss" (the loss function's, or the model's own `loss`), "accuracy" (argmax of
the logits against integer targets; positions labelled -100, transformers' "ignore", do
not count), "perplexity" (exp of the mean loss: for language models), or any callable
`fn(output, batch) -> number` giving a batch's mean, named by a mapping key or its name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data.dataloader import default_collate

from ..foundation.errors import UsageError, arg
from .batches import NO_TARGETS, batch_size_of, compute_loss, move_to, split
from .stream_sharding import ShardedStream

BUILTIN = ("loss", "accuracy", "perplexity")
IGNORE_INDEX = -100  # transformers' label for positions that do not count


def metric_functions(metrics: Any) -> dict[str, Any]:
    """{name: "builtin name" or callable}, from a name, a callable, a sequence or a mapping."""
    if metrics is None:
        return {}
    if isinstance(metrics, Mapping):
        items = list(metrics.items())
    else:
        if isinstance(metrics, str) or callable(metrics):
            metrics = [metrics]
        items = [(m if isinstance(m, str) else getattr(m, "__name__", f"metric_{i}"), m)
                 for i, m in enumerate(metrics)]
    found = {}
    for name, fn in items:
        if isinstance(fn, str):
            if fn not in BUILTIN:
                raise UsageError(f"{arg('metrics', fn)}: choose loss, accuracy, perplexity, or give a function "
                                 "fn(output, batch) -> number")
        elif not callable(fn):
            raise UsageError(f"{arg('metrics', repr(fn))}: a metric is a name or a function fn(output, batch) -> number")
        found[name] = fn
    return found


def logits_of(output: Any) -> Optional[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return output
    found = output.get("logits") if isinstance(output, Mapping) else getattr(output, "logits", None)
    return found if isinstance(found, torch.Tensor) else None


def targets_of(batch: Any, rest: tuple) -> Optional[torch.Tensor]:
    if isinstance(batch, Mapping):
        labels = batch.get("labels")
        return labels if isinstance(labels, torch.Tensor) else None
    return rest[0] if rest and isinstance(rest[0], torch.Tensor) else None


def accuracy(output: Any, batch: Any, rest: tuple) -> torch.Tensor:
    logits, targets = logits_of(output), targets_of(batch, rest)
    if logits is None or targets is None or targets.is_floating_point():
        raise UsageError("metric accuracy needs logits (a tensor output, or output.logits) and integer targets; "
                         "leave it out, or give metrics=[your_function]")
    predicted = logits.argmax(dim=-1)
    if isinstance(batch, Mapping) and predicted.shape[:2] == targets.shape[:2] and predicted.dim() == 2:
        predicted, targets = predicted[:, :-1], targets[:, 1:]  # a causal LM predicts the next token
    targets = targets.to(predicted.device)
    counted = targets != IGNORE_INDEX
    return ((predicted == targets) & counted).sum().double() / counted.sum().clamp(min=1).double()


def default_metrics(output: Any, batch: Any, rest: tuple) -> dict[str, Any]:
    """loss, plus accuracy where the output and targets make it meaningful (a classifier)."""
    found = {"loss": "loss"}
    targets = targets_of(batch, rest)
    if isinstance(output, torch.Tensor) and targets is not None and not targets.is_floating_point() \
            and output.dim() == targets.dim() + 1:
        found["accuracy"] = "accuracy"
    return found


class Shares:
    """This rank's batches of a map-style dataset: (indices, real count) each, every rank
    the same number of them."""

    def __init__(self, total: int, batch_size: int, shard: int, num_shards: int):
        per_shard = math.ceil(total / num_shards) if total else 0
        start, stop = min(shard * per_shard, total), min((shard + 1) * per_shard, total)
        self.batches = []
        for first in range(0, per_shard, batch_size):
            real = list(range(start + first, min(start + first + batch_size, stop)))
            self.batches.append((real or [0], len(real)))  # a stand-in sample, counted as none

    def __iter__(self):
        return (indices for indices, _ in self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def batches(dataset, batch_size: int, shard: int, num_shards: int, collate_fn: Optional[Callable],
            loader_kwargs: dict) -> Iterable[tuple[Any, int]]:
    """(batch, number of real samples in it) for this rank."""
    if isinstance(dataset, IterableDataset):
        stream = ShardedStream(dataset, batch_size, shard, num_shards, collate_fn)
        for samples in DataLoader(_Counted(stream), batch_size=None, **loader_kwargs):
            yield samples
        return
    shares = Shares(len(dataset), batch_size, shard, num_shards)
    loader = DataLoader(dataset, batch_sampler=shares, collate_fn=collate_fn or default_collate, **loader_kwargs)
    yield from zip(loader, (real for _, real in shares.batches))


class _Counted(torch.utils.data.IterableDataset):
    """A stream's collated batches with their sample counts."""

    def __init__(self, stream: ShardedStream):
        self.stream = stream

    def __iter__(self):
        for batch in self.stream:
            yield batch, batch_size_of(batch) or 1


def evaluate(prepared, dataset, *, batch_size: int, loss_fn: Optional[Callable], metrics: Any,
             collate_fn: Optional[Callable], shard: int, num_shards: int, device: torch.device,
             all_reduce: Callable[[torch.Tensor], torch.Tensor], reports: bool = True,
             loader_kwargs: Optional[dict] = None) -> dict:
    """The metrics' means over `dataset`, and "count". Every rank must call it; those that do
    not `report` (tensor-parallel peers of a reporting process) compute but do not count."""
    wanted = metric_functions(metrics)
    names: list[str] = list(wanted)
    sums: dict[str, torch.Tensor] = {}
    count = torch.zeros((), dtype=torch.float64, device=device)
    was_training = prepared.model.training
    prepared.model.eval()
    try:
        for batch, real in batches(dataset, batch_size, shard, num_shards, collate_fn, loader_kwargs or {}):
            batch = move_to(batch, device)
            inputs, rest = split(batch, NO_TARGETS)
            output = prepared.predict(inputs)
            if output is None or not reports:  # a pipeline's first stages; a tensor-parallel peer
                continue
            if not wanted and not names:
                wanted = default_metrics(output, batch, rest)
                names = list(wanted)
            values = _batch_values(wanted, output, batch, rest, loss_fn, inputs, device)
            for name, value in values.items():
                sums[name] = sums.get(name, torch.zeros((), dtype=torch.float64, device=device)) + value * real
            count += real
    finally:
        prepared.model.train(was_training)
    names = _agree_on_names(names)
    if not names:  # no process saw an output (an empty set): the loss, as None
        names = ["loss"]
    if not wanted:  # this process saw no output: the names' kinds are the defaults'
        wanted = {name: name for name in names}
    totals = torch.stack([count] + [sums.get(n, torch.zeros((), dtype=torch.float64, device=device)) for n in names])
    totals = all_reduce(totals)
    n = int(totals[0].item())
    result = {name: (totals[i + 1].item() / n if n else None) for i, name in enumerate(names)}
    for name in names:
        if wanted.get(name) == "perplexity" and result[name] is not None:
            result[name] = math.exp(min(result[name], 700.0))  # summed as the mean loss
    result["count"] = n
    return result


def _batch_values(wanted: dict, output: Any, batch: Any, rest: tuple, loss_fn: Optional[Callable],
                  inputs: Any, device: torch.device) -> dict[str, torch.Tensor]:
    values = {}
    loss = None
    for name, fn in wanted.items():
        if fn in ("loss", "perplexity"):
            if loss is None:
                loss = compute_loss(output, rest, loss_fn, inputs).detach().double()
            values[name] = loss  # perplexity: exp of the mean loss, taken at the end
        elif fn == "accuracy":
            values[name] = accuracy(output, batch, rest)
        else:
            value = fn(output, batch)
            values[name] = torch.as_tensor(value, dtype=torch.float64).detach()
    return {k: v.to(device) for k, v in values.items()}


def _agree_on_names(names: Sequence[str]) -> list[str]:
    """The metric names every rank reduces, in one order. With defaults chosen from the
    output, ranks that never saw an output (a pipeline's first stages) learn them from a
    rank that did."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return list(names)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(names))
    return max(gathered, key=len)
