"""A checkpoint written by 2 processes resumes in 1, and one written by 1 resumes in 2:
model and optimizer exactly as saved, data position carried over; for DDP and FSDP2."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import REPO, run, torchrun

WORKER = REPO / "tests" / "workers" / "checkpoint_worker.py"


def one_process(*args: str):
    return run([sys.executable, str(WORKER), *args], timeout=120, check=True)


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_resume_on_another_world_size(tmp_path, wrap):
    two, one = tmp_path / "saved-by-2", tmp_path / "saved-by-1"
    torchrun(WORKER, "--wrap", wrap, "--save", str(two), "--steps", "5", nproc=2, timeout=120, check=True)
    out = one_process("--wrap", wrap, "--load", str(two), "--save", str(one), "--steps", "3").stdout
    assert "restored step 5 saved by 2 process(es) into 1" in out
    assert "saved step 8 from 1 process(es)" in out
    out = torchrun(WORKER, "--wrap", wrap, "--load", str(one), "--steps", "2", nproc=2, timeout=120,
                   check=True).stdout
    assert "restored step 8 saved by 1 process(es) into 2" in out
