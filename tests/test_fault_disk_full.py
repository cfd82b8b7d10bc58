"""A full disk during a checkpoint: one line saying what, where and how much room was
needed, exit status 2 (never retried by --max-restarts), nothing half-written left as a
checkpoint. The disk is a 3 MB tmpfs mounted for the test (root can mount here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import scaletrain


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def test_a_full_disk_during_a_checkpoint_is_one_line_and_not_retried(small_disk: Path):
    out = small_disk / "run"
    done = scaletrain("train", "--strategy", "single", "--workload", "synthetic-mlp", "--epochs", "1",
                      "--checkpoint-every", "2", "--max-restarts", "2", "--out", str(out), timeout=240)
    errors = [line for line in done.stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1 and "the disk is full" in errors[0] and "previous checkpoint is kept" in errors[0], \
        done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "restart" not in done.stderr.lower()  # a full disk is not retried
    assert not list((out / "checkpoints").glob("step-*"))  # no checkpoint was published
