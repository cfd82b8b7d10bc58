"""A worker killed mid-epoch: with --max-restarts the group restarts by itself, resumes from
the last checkpoint and ends with exactly the parameters of an uninterrupted run."""

from __future__ import annotations

import os
import re
import signal

from scaletrain.checkpoint import latest_checkpoint
from tests.faults import Background, assert_same_tensors, final_model, scaletrain_argv, spawned_workers, wait_for

TRAIN = ["train", "--nproc-per-node", "2", "--workload", "digits-mlp", "--epochs", "2", "--batch-size", "16",
         "--checkpoint-every", "10", "--seed", "3", "--timeout", "30s"]


def test_sigkill_one_worker_restarts_and_matches_uninterrupted_run(tmp_path):
    interrupted, reference = tmp_path / "interrupted", tmp_path / "reference"
    with Background(scaletrain_argv(*TRAIN, "--max-restarts", "1", "--out", str(interrupted))) as job:
        wait_for(lambda: latest_checkpoint(interrupted / "checkpoints"), 150, "the first checkpoint", job.proc)
        victim = wait_for(lambda: spawned_workers(job.proc.pid), 10, "the workers", job.proc)[-1]
        os.kill(victim, signal.SIGKILL)
        status, out, err = job.finish(timeout=200)
    assert status == 0, f"{out}\n{err}"
    assert "restart 1 of 1" in err
    resumed = re.search(r"resumed from \S+step-(\d+) at step (\d+)", out)
    assert resumed, out
    step = int(resumed.group(2))
    total_steps = 2 * 45  # 1,437 samples / 2 ranks / batch 16 → 45 steps per epoch
    assert 10 <= step < total_steps and step % 10 == 0, "resumed mid-run, from a checkpoint"

    with Background(scaletrain_argv(*TRAIN, "--out", str(reference))) as job:
        status, out, err = job.finish(timeout=200)
    assert status == 0, f"{out}\n{err}"
    assert_same_tensors(final_model(interrupted), final_model(reference))
