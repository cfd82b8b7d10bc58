"""A finished rank always ends, with its program's exit status, under every launcher: the
rank runner imports no torch before the program, leaves without interpreter finalisation
once the program returned, and ends a rank frozen in torch's teardown deadlock. The short
version of benchmarks/teardown.py runs the plain DDP example consecutively under each."""

import re
import sys
import time

import pytest

from .helpers import REPO
from .launch_helpers import launch_argv, run_session

SCRIPTS = REPO / "tests" / "scripts"
LAUNCHERS = ["spawn", "torchrun", "mpirun"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_whose_program_returned_ends_with_its_status(launcher, tmp_path):
    """Each rank leaves a thread that would keep its interpreter alive forever and a child
    process; the ranks still end at once, rank 1 with its status 3, their children with
    them, and the runner had imported no torch."""
    started = time.monotonic()
    result, left = run_session(launch_argv("--launcher", launcher, "--nproc-per-node", "2",
                                           str(SCRIPTS / "unending_exit.py"), str(tmp_path)), timeout=90)
    assert result.returncode == 3, result.stdout + result.stderr
    assert not left
    assert result.stdout.count("torch imported before the program: False") == 2, result.stdout
    assert "rank 1 on host" in result.stderr and "exited with status 3" in result.stderr
    assert "traceback reported by the launcher" not in result.stderr  # an exit status has none
    assert time.monotonic() - started < 60


def test_a_rank_frozen_in_teardown_is_ended_with_status_0():
    """After destroy_process_group a rank keeps the GIL forever (what the Gloo teardown
    deadlock does): the teardown guard ends it, the job succeeds and says so."""
    result, left = run_session(launch_argv("--nproc-per-node", "2", str(SCRIPTS / "frozen_teardown.py")), timeout=90)
    assert result.returncode == 0, result.stderr
    assert not left
    assert result.stdout.count("done: 2.0") == 2
    frozen = [line for line in result.stderr.splitlines() if "froze in torch's teardown" in line]
    assert len(frozen) == 2 and all("ended with status 0" in line for line in frozen), result.stderr


def test_consecutive_plain_ddp_runs_all_end():
    """benchmarks/teardown.py, one round: every run of every launcher exits 0, none hangs."""
    result, left = run_session([sys.executable, str(REPO / "benchmarks" / "teardown.py"), "--runs", "1",
                                "--launchers", ",".join(LAUNCHERS), "--limit", "60"], timeout=500)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not left
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s",
                                                          result.stdout, re.M)}
    assert rows == {name: ("1", "1", "0", "0") for name in LAUNCHERS}, result.stdout
