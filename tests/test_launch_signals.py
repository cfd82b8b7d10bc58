"""Signals, the same under every launcher: Ctrl-C (SIGINT to the terminal's process group)
ends the job with 130 and SIGTERM with 143, never restarted, the launcher waiting for its
ranks before it exits; a rank killed by a signal is named."""

import os
import re
import signal
import time

import pytest

from .helpers import REPO
from .launch_helpers import finish_marked, kill_marked, launch_argv, marked, start_marked

SCRIPTS = REPO / "tests" / "scripts"


def start_and_wait_until_ready(launcher: str, *extra: str):
    proc, token = start_marked(launch_argv("--launcher", launcher, "--nproc-per-node", "2", *extra,
                                           str(SCRIPTS / "wait_forever.py")))
    pids = {}
    deadline = time.monotonic() + 90
    try:
        while len(pids) < 2:  # both ranks joined the group and wait
            line = proc.stdout.readline()
            assert line or proc.poll() is None, f"ended early: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "ranks never got ready"
            pids.update((int(rank), int(pid)) for rank, pid in re.findall(r"ready (\d+) (\d+)", line))
    except BaseException:
        kill_marked(token)
        proc.communicate()
        raise
    return proc, token, pids


@pytest.mark.parametrize("launcher", ["spawn", "torchrun", "mpirun"])
def test_ctrl_c_ends_the_job_with_130_and_no_restart(launcher):
    proc, token, _pids = start_and_wait_until_ready(launcher, "--max-restarts", "2")
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    started = time.monotonic()
    result, left = finish_marked(proc, token, timeout=60, grace=0.5)
    assert result.returncode == 130, result.stderr
    assert time.monotonic() - started < 30
    assert "restart" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "SIGINT received" in result.stderr
    assert "failed" not in result.stderr, result.stderr  # a rank the user stopped did not fail
    assert not left, f"{launcher} left processes behind"


@pytest.mark.parametrize("launcher", ["spawn", "torchrun", "mpirun"])
def test_sigterm_ends_the_job_with_143_after_its_ranks(launcher):
    proc, token, pids = start_and_wait_until_ready(launcher)
    ranks = set(pids.values())
    os.kill(proc.pid, signal.SIGTERM)  # the launcher alone, as a scheduler or `kill` does
    proc.wait(timeout=60)
    still = ranks & set(marked(token))  # the launcher waited for its ranks before it exited
    result, left = finish_marked(proc, token, timeout=10, grace=0.5)
    assert result.returncode == 143, result.stderr
    assert not still and not left
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("launcher, words", [("spawn", "killed by SIGKILL (exit status -9)"),
                                             ("torchrun", "ended without a word"),
                                             ("mpirun", "ended without a word")])
def test_a_rank_killed_by_a_signal_is_named(launcher, words):
    proc, token, pids = start_and_wait_until_ready(launcher)
    os.kill(pids[1], signal.SIGKILL)
    result, left = finish_marked(proc, token, timeout=90)
    assert result.returncode != 0 and not left
    first = next(line for line in result.stderr.splitlines() if "failed first" in line)
    assert first.startswith("scaletrain: rank 1 on host ") and words in first, result.stderr


@pytest.mark.parametrize("launcher", ["spawn", "torchrun", "mpirun"])
def test_sighup_ends_the_job_with_129_after_its_ranks(launcher):
    """A closed terminal or a dropped ssh session: like SIGTERM."""
    proc, token, pids = start_and_wait_until_ready(launcher)
    ranks = set(pids.values())
    os.kill(proc.pid, signal.SIGHUP)
    proc.wait(timeout=60)
    still = ranks & set(marked(token))
    result, left = finish_marked(proc, token, timeout=10, grace=0.5)
    assert result.returncode == 129, result.stderr
    assert not still and not left
    assert "SIGHUP received" in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("launcher", ["spawn", "torchrun", "mpirun"])
def test_no_rank_outlives_a_launcher_killed_outright(launcher):
    """SIGKILL leaves the launcher no chance to stop anything: the ranks see it gone."""
    proc, token, pids = start_and_wait_until_ready(launcher)
    os.kill(proc.pid, signal.SIGKILL)
    result, left = finish_marked(proc, token, timeout=30, grace=10)
    assert result.returncode == -signal.SIGKILL
    assert not left, f"{launcher}: processes outlived their launcher"
    assert "is gone; stopping this rank" in result.stderr, result.stderr


@pytest.mark.parametrize("launcher, after", [("spawn", 0.6), ("spawn", 1.8), ("torchrun", 1.8), ("mpirun", 1.8)])
def test_an_early_ctrl_c_is_one_line_and_130(launcher, after, tmp_path):
    """Ctrl-C while the command still imports, checks or starts its ranks: no traceback."""
    import sys

    proc, token = start_marked([sys.executable, "-m", "scaletrain", "train", "--workload", "digits-mlp",
                                "--nproc-per-node", "2", "--launcher", launcher, "--out", str(tmp_path / "run")])
    time.sleep(after)
    os.killpg(proc.pid, signal.SIGINT)
    result, left = finish_marked(proc, token, timeout=60, grace=1)
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and not left, result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("scaletrain")]
    assert len(ours) == 1 and ("SIGINT" in ours[0]), result.stderr
