"""`scaletrain train`'s ranks start as warm interpreters while the command reads its flags
(launchers/warm.py): which command lines start them, and that none outlives a command
that did not need them."""

import sys

import pytest

from scaletrain.cli.train_warm_up import ranks_to_warm

from .launch_helpers import run_session


@pytest.mark.parametrize("argv, count", [
    (["train", "--nproc-per-node", "3"], 3),
    (["train", "--nproc_per_node=2", "--launcher", "spawn"], 2),
    (["train", "--nproc-per-node", "1"], 0),
    (["train", "--nproc-per-node", "2", "--strategy", "single"], 0),
    (["train", "--nproc-per-node", "2", "--launcher", "torchrun"], 0),
    (["train", "--nproc-per-node", "2", "--nnodes", "2"], 0),
    (["train", "--nproc-per-node", "2", "--dry-run"], 0),
    (["train", "--nproc-per-node", "2", "--config", "run.yaml"], 0),
    (["train", "--nproc-per-node", "two"], 0),
])
def test_which_command_lines_warm_up_their_ranks(argv, count):
    assert ranks_to_warm(argv, environ={}) == count


def test_warm_interpreters_a_refused_command_did_not_need_are_ended(tmp_path):
    result, left = run_session([sys.executable, "-m", "scaletrain", "train", "--nproc-per-node", "2", "--lr", "fast",
                                "--out", str(tmp_path / "out")], timeout=60)
    assert result.returncode == 2 and "expected a number" in result.stderr
    assert not left, "warm interpreters outlived the command"
