"""Checkpoint files: a save killed at any moment leaves the previous checkpoint loadable,
and a checkpoint crafted to run code when unpickled is refused without running it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import scaletrain
from scaletrain.checkpoint import CheckpointError, latest_checkpoint
from scaletrain.checkpoint.checksums import CHECKSUM_FILE, file_checksum
from tests.helpers import REPO, run, scaletrain as scaletrain_cli


@pytest.fixture
def single_run():
    with scaletrain.init(strategy="single", seed=0) as r:
        yield r


@pytest.mark.parametrize("where", ["state-file", "before-marker", "before-pointer"])
def test_kill_during_save_leaves_previous_checkpoint_loadable(tmp_path, single_run, where):
    directory = tmp_path / "ckpt"
    result = run([sys.executable, str(REPO / "tests" / "workers" / "kill_during_save.py"), str(directory), where],
                 timeout=60)
    assert result.returncode == -9 and "saved step 1" in result.stdout, result
    found = latest_checkpoint(directory)
    assert found is not None and found.name == "step-00000001"
    model = torch.nn.Linear(64, 64)
    resumed = single_run.load_checkpoint(directory, model)
    assert resumed["step"] == 1
    if where != "before-pointer":  # the torn save is there, but not taken for a checkpoint
        assert [p for p in directory.iterdir() if p.name.startswith(".step-00000002")]
    # The next save clears the leftovers and moves `latest` on.
    single_run.save_checkpoint(directory, model, step=3)
    assert latest_checkpoint(directory).name == "step-00000003"
    assert not [p for p in directory.iterdir() if p.name.startswith(".step-")]


def test_roundtrip_restores_model_optimizer_data_position_and_rng(tmp_path, single_run):
    from scaletrain.workloads.digits import digits_datasets
    import torch.nn.functional as F

    train_set, _ = digits_datasets(0)

    def make():
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        model, optimizer, schedule = single_run.setup(model, optimizer, schedule)
        return model, optimizer, schedule, single_run.loader(train_set, batch_size=64)

    model, optimizer, schedule, loader = make()
    batches = iter(loader)
    for _ in range(5):
        single_run.train_step(model, optimizer, *next(batches), F.cross_entropy)
        schedule.step()
    single_run.save_checkpoint(tmp_path, model, optimizer, scheduler=schedule, loader=loader)
    expected_next = next(batches)
    expected_random = torch.rand(3)

    torch.manual_seed(123)
    model2, optimizer2, schedule2, loader2 = make()
    resumed = single_run.load_checkpoint(tmp_path, model2, optimizer2, scheduler=schedule2, loader=loader2)
    assert resumed["step"] == 5 and single_run.steps_taken == 5
    assert torch.equal(torch.rand(3), expected_random)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    assert optimizer2.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] == 0.025
    assert schedule2.state_dict() == schedule.state_dict()
    for a, b in zip(optimizer.state.values(), optimizer2.state.values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
    inputs, targets = next(iter(loader2))  # the 6th batch of the same epoch, not the 1st
    assert torch.equal(inputs, expected_next[0]) and torch.equal(targets, expected_next[1])


class RunsCode:
    """Unpickling this calls exec(): what a tampered checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('the checkpoint ran code')",))


@pytest.fixture
def malicious_checkpoint(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "code-ran"
    folder = tmp_path / "run" / "checkpoints" / "step-00000005"
    folder.mkdir(parents=True)
    torch.save({"format": 2, "progress": {"step": 5}, "model": {"0.weight": torch.zeros(2)},
                "extra": RunsCode(marker)}, folder / "state.pt")
    # Whoever crafts the file can write matching checksums too: the unpickler must hold alone.
    (folder / CHECKSUM_FILE).write_text(json.dumps({"state.pt": file_checksum(folder / "state.pt")}))
    (folder / "COMPLETE").write_text("5\n")
    return folder, marker


def test_malicious_pickle_is_live(malicious_checkpoint):
    """The payload really runs under an unrestricted load (so the refusals below mean something)."""
    folder, marker = malicious_checkpoint
    code = f"import torch; torch.load({str(folder / 'state.pt')!r}, weights_only=False)"
    run([sys.executable, "-c", code], timeout=60, check=True)
    assert marker.exists()


def test_malicious_checkpoint_refused_by_library(malicious_checkpoint, single_run):
    folder, marker = malicious_checkpoint
    with pytest.raises(CheckpointError, match="refused to load .*tampered"):
        single_run.load_checkpoint(folder, torch.nn.Linear(2, 2))
    assert not marker.exists()


def test_malicious_checkpoint_refused_by_cli(malicious_checkpoint, tmp_path):
    folder, marker = malicious_checkpoint
    out = tmp_path / "new-run"
    result = scaletrain_cli("train", "--nproc-per-node", "1", "--resume", str(folder.parent.parent), "--out",
                            str(out), timeout=120)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scaletrain: error: --resume") and "refused to load" in lines[0]
    assert not marker.exists() and not out.exists()
