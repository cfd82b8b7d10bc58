"""A rank that stops responding (SIGSTOP) makes the others exit non-zero within the
timeout + 15 s, with one line naming it; nothing is left running."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from scaletrain.checkpoint import latest_checkpoint
from tests.faults import Background, scaletrain_argv, spawned_workers, wait_for
from tests.helpers import REPO, torchrun

TIMEOUT_S = 10
LONG_RUN = ["train", "--nproc-per-node", "2", "--workload", "digits-mlp", "--epochs", "50", "--batch-size", "8",
            "--checkpoint-every", "5", "--timeout", f"{TIMEOUT_S}s"]


@pytest.mark.parametrize("victim_rank", [1, 0])
def test_sigstop_one_rank_names_it_and_all_exit(tmp_path, victim_rank):
    out = tmp_path / "run"
    with Background(scaletrain_argv(*LONG_RUN, "--out", str(out))) as job:
        wait_for(lambda: latest_checkpoint(out / "checkpoints"), 150, "training to be under way", job.proc)
        workers = wait_for(lambda: spawned_workers(job.proc.pid), 10, "the workers", job.proc)
        assert len(workers) == 2
        victim = workers[victim_rank]  # the launcher starts rank 0 first: lower pid
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        status, stdout, stderr = job.finish(timeout=TIMEOUT_S + 60)
        took = time.monotonic() - stopped_at
    assert status != 0
    assert took <= TIMEOUT_S + 15, f"took {took:.1f} s\n{stderr}"
    errors = [line for line in stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert len(errors) == 1, stderr
    if victim_rank == 1:
        named = re.search(r"rank (\d+) stopped responding \(pid (\d+), silent for \d+ s, last seen in [a-z -]+\d+", errors[0])
        assert named and named.group(1) == "1" and int(named.group(2)) == victim, errors[0]
    else:  # rank 0 hosts the rendezvous store under spawn: its silence is the store's
        assert "rank 1 waited" in errors[0] and "rank 0 stopped responding" in errors[0], errors[0]
    assert not os.path.exists(f"/proc/{victim}") or open(f"/proc/{victim}/stat").read().split()[2] == "Z"


def test_a_long_operation_every_rank_is_in_is_not_a_hang_but_a_rank_late_for_setup_is_named():
    started = time.monotonic()
    result = torchrun(REPO / "tests" / "workers" / "slow_operation.py", nproc=2, timeout=120)
    assert "both ranks came through" in result.stdout, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert result.returncode != 0 and len(errors) == 1, result.stderr
    assert errors[0].startswith("scaletrain: error: rank 1 waited 3 s in setup after step 0; rank 0 did not arrive "
                                "(alive but in no collective after step 0)"), errors[0]
    assert "Timed out waiting" not in result.stderr and time.monotonic() - started < 60, result.stderr
