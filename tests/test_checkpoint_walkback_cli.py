"""`--resume auto` past a damaged newest checkpoint, as a user meets it: the run continues
from the newest checkpoint that verifies, and says once (not once per process that checked
it) which one it skipped and why."""

from __future__ import annotations

import pytest

from tests.helpers import scaletrain

MLP = ["train", "--workload", "digits-mlp", "--nproc-per-node", "2", "--checkpoint-every", "5"]


@pytest.mark.timeout(240)
def test_damaged_newest_checkpoint_is_skipped_with_one_note(tmp_path):
    out = tmp_path / "run"
    first = scaletrain(*MLP, "--epochs", "1", "--out", str(out), timeout=120)
    assert first.returncode == 0, first.stderr
    checkpoints = sorted(p for p in (out / "checkpoints").iterdir() if p.name.startswith("step-"))
    newest, previous = checkpoints[-1], checkpoints[-2]
    damaged = next(p for p in sorted(newest.rglob("*")) if p.is_file() and p.suffix in (".pt", ".distcp"))
    damaged.write_bytes(damaged.read_bytes()[:-16] + b"\0" * 16)  # same size, different bytes

    resumed = scaletrain(*MLP, "--epochs", "2", "--out", str(out), "--resume", "auto", timeout=150)
    assert resumed.returncode == 0, resumed.stderr
    said = resumed.stdout + resumed.stderr
    assert said.count(f"skipped {newest.name}") == 1, said
    assert f"resumed from {previous} " in said, said
