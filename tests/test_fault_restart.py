"""A worker killed mid-epoch: with --max-restarts the group restarts by itself, resumes from
the last checkpoint and ends with exactly the parameters of an uninterrupted run, whether
scaletrain's spawn launcher or torchrun's agent does the restarting (the former with
asynchronous checkpoints)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys

import pytest

from scaletrain.checkpoint import latest_checkpoint
from tests.conftest import _descendants
from tests.faults import (Background, assert_same_tensors, cmdline, final_model, scaletrain_argv, spawned_workers,
                          wait_for)
from tests.helpers import free_port

FLAGS = ["--workload", "digits-mlp", "--epochs", "2", "--batch-size", "16", "--checkpoint-every", "10", "--seed", "3",
         "--timeout", "30s"]
TOTAL_STEPS = 2 * 45  # 1,437 samples / 2 ranks / batch 16 → 45 steps per epoch


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The final parameters of an uninterrupted 2-process run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    with Background(scaletrain_argv("train", "--nproc-per-node", "2", *FLAGS, "--out", str(out))) as job:
        status, stdout, stderr = job.finish(timeout=200)
    assert status == 0, f"{stdout}\n{stderr}"
    return final_model(out)


def kill_one_worker_after_first_checkpoint(job: Background, out, workers) -> None:
    wait_for(lambda: latest_checkpoint(out / "checkpoints"), 150, "the first checkpoint", job.proc)
    victim = wait_for(lambda: workers(job.proc.pid), 10, "the workers", job.proc)[-1]
    os.kill(victim, signal.SIGKILL)


def assert_each_step_and_epoch_recorded_once(out) -> None:
    """The restarted group went back to a checkpoint: what it did again is recorded once."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["kind"] == "step"]
    assert steps == list(range(10, TOTAL_STEPS + 1, 10))
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2]


def resumed_step(stdout: str) -> int:
    resumed = re.search(r"resumed from \S+step-(\d+) at step (\d+)", stdout)
    assert resumed, stdout
    step = int(resumed.group(2))
    assert 10 <= step < TOTAL_STEPS and step % 10 == 0, "resumed mid-run, from a checkpoint"
    return step


def test_spawn_restarts_after_sigkill_and_matches_uninterrupted_run(tmp_path, reference):
    """With asynchronous checkpoints (written while training goes on): the same end."""
    out = tmp_path / "run"
    with Background(scaletrain_argv("train", "--nproc-per-node", "2", *FLAGS, "--max-restarts", "1",
                                    "--checkpoint-async", "--out", str(out))) as job:
        kill_one_worker_after_first_checkpoint(job, out, spawned_workers)
        status, stdout, stderr = job.finish(timeout=200)
    assert status == 0, f"{stdout}\n{stderr}"
    assert "restart 1 of 1" in stderr
    resumed_step(stdout)
    assert_same_tensors(final_model(out), reference)
    assert_each_step_and_epoch_recorded_once(out)


def torchrun_workers(pid: int) -> list[int]:
    return sorted(p for p in _descendants(pid) if "scaletrain train" in cmdline(p)
                  and "torch.distributed.run" not in cmdline(p))


def test_torchrun_agent_restarts_after_sigkill_and_matches_uninterrupted_run(tmp_path, reference):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "scaletrain", "train", *FLAGS,
            "--out", str(out)]
    with Background(argv) as job:
        kill_one_worker_after_first_checkpoint(job, out, torchrun_workers)
        status, stdout, stderr = job.finish(timeout=200)
    assert status == 0, f"{stdout}\n{stderr}"
    resumed_step(stdout)
    assert_same_tensors(final_model(out), reference)
    assert_each_step_and_epoch_recorded_once(out)
