"""Start-up is bounded and named under every launcher: a rank that never joins (stopped, or
busy elsewhere) is named after `--timeout`, and the job ends with nothing left behind; more
processes than cores is a warning, and a start-up that still works."""

import json
import time

import pytest

from .helpers import REPO
from .launch_helpers import launch_argv, run_session

SCRIPTS = REPO / "tests" / "scripts"


@pytest.mark.parametrize("launcher, how", [("spawn", "stopped"), ("torchrun", "sleeping"), ("mpirun", "sleeping")])
def test_a_rank_that_never_joins_is_named(launcher, how):
    """Rank 1 never calls init_process_group (SIGSTOPped, or asleep); rank 0 waits for it.
    Under mpirun rank 0 hosts the store itself; under spawn and torchrun the launcher does."""
    extra = ["--sleep"] if how == "sleeping" else []
    started = time.monotonic()
    result, left = run_session(launch_argv("--launcher", launcher, "--nproc-per-node", "2", "--timeout", "5",
                                           str(SCRIPTS / "never_join.py"), *extra), timeout=120)
    assert result.returncode == 3, result.stderr
    assert not left, f"{launcher} left processes behind"
    first = next(line for line in result.stderr.splitlines() if "failed first" in line)
    assert first.startswith("scaletrain: rank 0 on host ") and "rank 1 did not join within 5s" in first, result.stderr
    assert "Traceback" not in result.stderr.split(first)[1], result.stderr
    assert time.monotonic() - started < 60


def test_more_processes_than_cores_warns_and_starts(tmp_path):
    import os

    nproc = len(os.sched_getaffinity(0)) + 1
    result, left = run_session(launch_argv("--nproc-per-node", str(nproc), str(SCRIPTS / "report_rank.py")),
                               timeout=150)
    assert result.returncode == 0, result.stderr
    assert not left
    assert f"warning: {nproc} processes on {nproc - 1} CPU core(s)" in result.stderr
    ranks = [json.loads(line.split(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("DETECTED ")]
    assert sorted(r["rank"] for r in ranks) == list(range(nproc))
    assert {r["all_reduce"] for r in ranks} == {nproc * (nproc + 1) / 2}


def test_a_node_that_never_joins_torchruns_rendezvous_is_named_within_the_timeout():
    """Node 0 of 2 alone: torchrun's rendezvous of the nodes comes before any rank, so the
    launcher bounds it itself: one line naming node 1, exit 3, nothing left."""
    from .helpers import free_port

    started = time.monotonic()
    result, left = run_session(launch_argv("--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                                           "--master-port", str(free_port()), "--nproc-per-node", "1",
                                           "--timeout", "5", str(REPO / "examples" / "plain_ddp.py")), timeout=60)
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - started < 20 and not left
    ours = [line for line in result.stderr.splitlines() if line.startswith("scaletrain")]
    assert len(ours) == 1 and "node(s) 1 never joined" in ours[0] and "within 5s" in ours[0], result.stderr
