"""In one process: streams dealt out among ranks and workers, the user's own sampler shared
out, evaluation with metrics over batches of any form, the task told from the data, and
the refusals of a strategy that cannot take a batch."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, SequentialSampler, TensorDataset

import scaletrain
from scaletrain.data.loaders import ShardedLoader
from scaletrain.foundation.errors import UsageError
from scaletrain.data.stream_sharding import deal
from scaletrain.workloads.tasks import derive


@pytest.mark.parametrize("n", [2, 7, 8, 9, 23, 64, 65])
@pytest.mark.parametrize("workers", [1, 3])
def test_a_stream_is_dealt_once_in_equal_batch_counts(n, workers):
    seen, counts = [], []
    for shard in range(2):
        batches = [b for w in range(workers) for b in deal(iter(range(n)), 4, shard, 2, w, workers)]
        counts.append(len(batches))
        seen += [x for b in batches for x in b]
    assert sorted(seen) == list(range(n))
    assert counts[0] == counts[1]


def test_a_stream_shorter_than_the_ranks_is_refused():
    with pytest.raises(UsageError, match="yielded 1 sample"):
        list(deal(iter(range(1)), 4, 0, 2))


def test_whole_batches_only_leaves_the_tail_out():
    assert [len(b) for b in deal(iter(range(19)), 4, 1, 2, drop_tail=True)] == [4, 4]


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(10.0))


def loader(dataset, shard=0, **kwargs):
    return ShardedLoader(dataset, 2, shard=shard, num_shards=2, shuffle=False, drop_last=False, seed=0,
                         device=torch.device("cpu"), **kwargs)


def test_a_stream_has_no_length_but_iterates_every_epoch():
    stream_loader = loader(Stream())
    with pytest.raises(TypeError, match="no length"):
        len(stream_loader)
    assert [b.tolist() for b in stream_loader] == [[0.0, 1.0], [4.0, 5.0, 8.0]]  # the tail shared out
    assert sum(1 for _ in stream_loader) == 2  # a second epoch


def test_the_users_sampler_is_shared_out_and_a_lengthless_one_refused():
    data = TensorDataset(torch.arange(7))
    shares = [[x for (b,) in loader(data, shard, sampler=SequentialSampler(data)) for x in b.tolist()]
              for shard in range(2)]
    assert shares == [[0, 2, 4, 6], [1, 3, 5, 0]]  # the order is the sampler's; the short share repeats one

    class Endless(torch.utils.data.Sampler):
        def __iter__(self):
            return iter(range(7))
    with pytest.raises(UsageError, match="without a length"):
        loader(data, sampler=Endless())


def test_collate_fn_is_the_users():
    data = TensorDataset(torch.arange(4))
    batches = list(loader(data, collate_fn=lambda rows: {"ids": torch.stack([r[0] for r in rows])}))
    assert batches[0]["ids"].tolist() == [0, 2]


class OwnLoss(nn.Module):
    """Takes keyword arguments and returns its own loss, as a transformers model does."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, x, y):
        prediction = self.linear(x).squeeze(-1)
        return {"loss": ((prediction - y) ** 2).mean(), "prediction": prediction}


class Rows(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 3, generator=g), torch.randn(n, generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


def test_evaluate_dict_batches_own_loss_and_custom_metrics():
    data = Rows(10)
    with scaletrain.init("single", environ={}) as run:
        model = run.setup(OwnLoss())
        result = run.evaluate(model, data, batch_size=4,
                              metrics={"loss": "loss", "ppl": "perplexity",
                                       "mae": lambda out, batch: (out["prediction"] - batch["y"]).abs().mean()})
        with torch.no_grad():
            out = model(x=data.x, y=data.y)
    assert result["count"] == 10
    assert result["loss"] == pytest.approx(out["loss"].item(), rel=1e-6)  # batches of 4, 4, 2 weighted by size
    assert result["ppl"] == pytest.approx(math.exp(result["loss"]))
    assert result["mae"] == pytest.approx((out["prediction"] - data.y).abs().mean().item(), rel=1e-6)


def test_evaluate_a_stream_and_an_empty_set():
    model = nn.Linear(1, 2)
    with scaletrain.init("single", environ={}) as run:
        model = run.setup(model)

        class Pairs(IterableDataset):
            def __iter__(self):
                return ((torch.ones(1) * i, torch.tensor(i % 2)) for i in range(9))
        assert run.evaluate(model, Pairs(), batch_size=4)["count"] == 9
        empty = run.evaluate(model, TensorDataset(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long)))
    assert empty["count"] == 0 and empty["loss"] is None


def test_the_task_is_told_from_a_sample():
    assert derive({"input_ids": torch.zeros(3)}) == "own"
    assert derive((torch.zeros(3), torch.tensor(1))) == "classification"
    assert derive((torch.zeros(3), torch.tensor(1.5))) == "regression"
    assert derive((torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))) == "lm"


def test_fp16_trains_through_the_scaler():
    torch.manual_seed(0)
    with scaletrain.init("single", precision="fp16", environ={}) as run:
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        model, optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
        losses = [run.train_step(model, optimizer, x, y, max_grad_norm=1.0).item() for _ in range(20)]
        assert run.scaler.enabled and run.scaler.scaler.get_scale() > 1
    assert all(math.isfinite(l) for l in losses) and losses[-1] < losses[0]


def test_a_pipeline_refuses_dict_batches_in_one_line():
    with scaletrain.init("pipeline", environ={}, microbatches=1) as run:
        model, optimizer = run.setup(nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1)),
                                     torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
        with pytest.raises(UsageError, match="for mapping batches use strategy ddp or fsdp"):
            run.train_step(model, optimizer, {"x": torch.zeros(2, 3)})


def test_main_process_first_and_gather_in_one_process():
    with scaletrain.init("single", environ={}) as run:
        with run.main_process_first():
            pass
        assert run.gather(torch.arange(3)).tolist() == [0, 1, 2]


@pytest.mark.timeout(120)
def test_a_stream_uneven_across_ranks_stops_them_together_in_one_line():
    """200 samples on rank 0, 120 on rank 1: named at the batch where they part, exit 2,
    instead of a rank waiting in a gradient sync its peer never joins (Gloo's abort)."""
    import sys
    import time

    from .helpers import REPO, run

    started = time.monotonic()
    result = run([sys.executable, "-m", "scaletrain", "launch", "--nproc-per-node", "2",
                  str(REPO / "tests" / "scripts" / "uneven_stream.py")], timeout=100)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ended after 7 batch(es) on some ranks but went on on others" in lines[0], result.stderr
    assert "TRAINED" not in result.stdout and time.monotonic() - started < 60
