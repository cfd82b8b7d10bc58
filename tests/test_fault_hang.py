"""A rank that stops responding (SIGSTOP) makes the others exit non-zero within the
timeout + 15 s, with one line naming it; nothing is left running. The run's folder then
holds every rank's stacks and last collectives, and `scaletrain report` explains them."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from scaletrain.checkpoint import latest_checkpoint
from tests.faults import Background, scaletrain_argv, spawned_workers, wait_for
from tests.helpers import REPO, run, torchrun

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
        # The heartbeat follows the steps a beat at a time (every second at --timeout 10s, and
        # 0.25 s after an operation begins): steps 1 to 8 and a checkpoint can all pass before its
        # first beat after setup. Stopped after two beats' time, its last beat is of training.
        time.sleep(2.5)
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        status, stdout, stderr = job.finish(timeout=TIMEOUT_S + 60)
        took = time.monotonic() - stopped_at
    assert status != 0
    assert took <= TIMEOUT_S + 15, f"took {took:.1f} s\n{stderr}"
    errors = [line for line in stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert len(errors) == 1, stderr
    if victim_rank == 1:
        named = re.search(r"rank (\d+) stopped responding \(pid (\d+), silent for \d+ s, last seen in [a-z -]+(\d+)",
                          errors[0])
        assert named and named.group(1) == "1" and int(named.group(2)) == victim, errors[0]
        # Where it stopped, not where its heartbeat happened to fall: stopped after the checkpoint
        # of step 5, it is not "last seen in setup after step 0" (its heartbeat follows its steps).
        assert int(named.group(3)) >= 5 and "setup" not in errors[0], errors[0]
        # The run's folder holds both ranks' evidence, and the line says where.
        assert all((out / "hang-0" / f"rank-{r}-{kind}").is_file() for r in (0, 1)
                   for kind in ("stacks.txt", "collectives.json")), sorted(os.listdir(out))
        assert str(out / "hang-0") in errors[0], errors[0]
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


def test_rank_stopped_inside_an_allreduce_leaves_every_ranks_evidence(tmp_path):
    """Gloo, 2 ranks, --timeout 5: rank 1 stopped (SIGSTOP) inside the 4th all-reduce."""
    began = time.monotonic()
    result = run([*scaletrain_argv("launch", "--nproc-per-node", "2", str(REPO / "tests" / "workers" /
                                   "hang_in_allreduce.py"), str(tmp_path))], timeout=90)
    took = time.monotonic() - began
    assert result.returncode == 3, result.stderr
    assert took < 60, took
    folder = tmp_path / "hang-0"
    # Within the timeout (5 s) and the verdict's look at the heartbeats, the evidence is written.
    entered = float(re.search(r"enters the fourth all-reduce at ([\d.]+)", result.stdout).group(1))
    assert (folder / "hang.json").stat().st_mtime - entered < 5 + 10, result.stdout
    for rank in (0, 1):
        assert (folder / f"rank-{rank}-stacks.txt").is_file() and (folder / f"rank-{rank}-collectives.json").is_file()
    # Rank 1 could not write a word once stopped: its evidence is what it published while in the all-reduce.
    assert "in _all_reduce" in (folder / "rank-1-stacks.txt").read_text()
    assert "Thread scaletrain-watchdog" in (folder / "rank-0-stacks.txt").read_text()  # every thread
    records = {r: json.loads((folder / f"rank-{r}-collectives.json").read_text()) for r in (0, 1)}
    pending = [e for e in records[0]["flight_recorder"] if not e["done"]]
    assert [e["name"] for e in pending] == ["all_reduce"], pending
    seq = pending[0]["seq"]
    assert seq in {e["seq"] for e in records[1]["flight_recorder"]}  # rank 1 had entered it
    assert [e["name"] for e in records[0]["scaletrain_ops"] if e["name"] == "all-reduce"] == ["all-reduce"] * 4
    errors = [line for line in result.stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert len(errors) == 1, result.stderr
    line = errors[0]
    assert "rank 1 stopped responding" in line and f"all_reduce #{seq}" in line and "which every rank entered" in line
    assert str(folder) in line, line
    report = run(scaletrain_argv("report", str(folder)), timeout=60, check=True).stdout
    assert "Stuck: rank 1 stopped responding" in report, report
    assert f"The job is stuck in all_reduce #{seq}" in report and "Every rank entered it; none finished it." in report
