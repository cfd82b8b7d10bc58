"""`--resume auto` past a damaged newest checkpoint, as a user meets it: the run continues
from the newest checkpoint that verifies, and says once (not once per process that checked
it) which one it skipped and why — whether `scaletrain train` started the ranks or torchrun
did."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import free_port, run, scaletrain

MLP = ["train", "--workload", "digits-mlp", "--checkpoint-every", "5"]


def damaged_run(out: Path) -> tuple[Path, Path]:
    """A finished 1-epoch run in `out` whose newest checkpoint no longer verifies:
    (that checkpoint, the one before it)."""
    first = scaletrain(*MLP, "--nproc-per-node", "2", "--epochs", "1", "--out", str(out), timeout=120)
    assert first.returncode == 0, first.stderr
    checkpoints = sorted(p for p in (out / "checkpoints").iterdir() if p.name.startswith("step-"))
    newest, previous = checkpoints[-1], checkpoints[-2]
    damaged = next(p for p in sorted(newest.rglob("*")) if p.is_file() and p.suffix in (".pt", ".distcp"))
    damaged.write_bytes(damaged.read_bytes()[:-16] + b"\0" * 16)  # same size, different bytes
    return newest, previous


def skipped_once(resumed, newest: Path, previous: Path) -> None:
    assert resumed.returncode == 0, resumed.stderr
    said = resumed.stdout + resumed.stderr
    assert said.count(f"skipped {newest.name}") == 1, said
    assert f"resumed from {previous} " in said, said


@pytest.mark.timeout(240)
def test_damaged_newest_checkpoint_is_skipped_with_one_note(tmp_path):
    out = tmp_path / "run"
    newest, previous = damaged_run(out)
    resumed = scaletrain(*MLP, "--nproc-per-node", "2", "--epochs", "2", "--out", str(out), "--resume", "auto",
                         timeout=150)
    skipped_once(resumed, newest, previous)


@pytest.mark.timeout(240)
def test_under_torchrun_rank_0_names_the_skipped_checkpoint(tmp_path):
    """No command checked the resume before the ranks started: rank 0 says it, once."""
    out = tmp_path / "run"
    newest, previous = damaged_run(out)
    resumed = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                   "127.0.0.1", "--master-port", str(free_port()), "-m", "scaletrain", *MLP, "--epochs", "2",
                   "--out", str(out), "--resume", "auto"], timeout=150)
    skipped_once(resumed, newest, previous)
