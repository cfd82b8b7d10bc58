"""Speed defaults: core pinning, DDP options, the fused optimizer, start-up measured from
the command, and the flags that control them."""

import json
import os
import time

import pytest
import torch

from scaletrain.cli import build_parser
from scaletrain.process.devices import core_set, pin_cores
from scaletrain.foundation.errors import UsageError
from scaletrain.process.startup_time import process_age
from scaletrain.train.config import TrainConfig
from scaletrain.strategies.ddp import DDPStrategy
from scaletrain.train.optimizer import adam
from scaletrain.workloads.models import digits_mlp

from .helpers import scaletrain


@pytest.mark.parametrize("cores,procs", [(2, 2), (8, 2), (7, 3), (16, 4), (3, 3)])
def test_core_sets_are_disjoint_and_cover_every_core(cores, procs):
    sets = [core_set(rank, procs, list(range(cores))) for rank in range(procs)]
    assert sorted(c for s in sets for c in s) == list(range(cores))
    assert max(map(len, sets)) - min(map(len, sets)) <= 1


def test_one_process_is_not_pinned():
    before = os.sched_getaffinity(0)
    assert pin_cores(0, 1) is None
    assert os.sched_getaffinity(0) == before


def test_ddp_options_are_checked():
    with pytest.raises(UsageError, match="grad_compression='int8': choose one of none, bf16"):
        DDPStrategy(grad_compression="int8")
    with pytest.raises(UsageError, match="bucket_size=10 does not apply to strategy='ddp'"):
        DDPStrategy(bucket_size=10)
    assert DDPStrategy(grad_compression="bf16", bucket_cap_mb=4, static_graph=True).options.grad_compression == "bf16"


def _config(*argv):
    args = build_parser().parse_args(["train", *argv])
    return TrainConfig.from_args(args)


def test_flags_become_strategy_options():
    config = _config("--grad-compression", "powersgd", "--bucket-cap-mb", "8", "--no-pin-cores")
    assert config.strategy_options == {"grad_compression": "powersgd", "bucket_cap_mb": 8.0}
    assert config.pin_cores is False
    assert _config().strategy_options == {} and _config().pin_cores is True


def test_compression_for_a_strategy_without_gradient_all_reduce_is_one_line_exit_2():
    result = scaletrain("train", "--strategy", "single", "--grad-compression", "bf16", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--grad-compression bf16" in result.stderr
    assert "Traceback" not in result.stderr


def test_fused_adam_matches_torch_default_adam():
    def train(make):
        torch.manual_seed(0)
        model = digits_mlp()
        optimizer = make(model.parameters())
        for step in range(5):
            optimizer.zero_grad()
            model(torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(step))).sum().backward()
            optimizer.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    fused = adam([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    assert fused.defaults["fused"] is True
    torch.testing.assert_close(train(lambda p: adam(p, lr=1e-3)), train(lambda p: torch.optim.Adam(p, lr=1e-3)),
                               atol=1e-5, rtol=0)


def test_process_age_counts_from_the_process_start():
    age = process_age(os.getpid())
    assert age is not None and 0 < age < time.monotonic() + 1


def test_trainer_reports_startup_from_the_command_and_pins_cores(tmp_path):
    started = time.time()
    result = scaletrain("train", "--workload", "digits-mlp", "--nproc-per-node", "2", "--epochs", "1",
                        "--grad-compression", "bf16", "--device", "cpu", "--out", str(tmp_path / "run"),
                        timeout=180)
    elapsed = time.time() - started
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # From the command's start, which the test's own clock brackets.
    assert 0 < summary["startup_seconds"] < elapsed
    assert "start-up to first step" in result.stdout
    assert summary["grad_compression"] == "bf16" and summary["static_graph"] is False
    if len(os.sched_getaffinity(0)) >= 2:
        assert summary["pinned_cores"] and len(summary["pinned_cores"]) == summary["threads_per_process"]
