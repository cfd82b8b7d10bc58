"""Every strategy saves at step k, resumes in a new job, and ends exactly (torch.equal) where
an uninterrupted run ends: single, dp, mp in one process; ddp, hybrid, pipeline (stages, and
replicas of one stage) and fsdp at world size 2; full and sharded layouts; with gradient
accumulation. A checkpoint of another model is refused before training starts."""

from __future__ import annotations

import sys

import pytest
import torch

from scaletrain.checkpoint import load_state
from tests.helpers import REPO, run, scaletrain, torchrun

WORKER = REPO / "tests" / "workers" / "resume_worker.py"


def assert_same_finish(root):
    names = sorted(p.name for p in root.iterdir())
    assert names, "nothing was saved"
    for name in names:
        first = load_state(root / name / "first" / "step-00000008" / "state.pt")
        second = load_state(root / name / "second" / "step-00000008" / "state.pt")
        assert first["model"].keys() == second["model"].keys() and first["model"], name
        for key, value in first["model"].items():
            assert torch.equal(value, second["model"][key]), f"{name}: {key} differs after resuming"
        for key, value in first["optimizer"].items():
            other = second["optimizer"][key]
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, other), f"{name}: {key}"
            else:  # settings such as betas may come back as a list instead of a tuple
                assert (list(value) if isinstance(value, tuple) else value) == \
                    (list(other) if isinstance(other, tuple) else other), f"{name}: {key}"
    return names


@pytest.mark.timeout(200)
def test_one_process_strategies_resume_exactly(tmp_path):
    for phase in ("first", "second"):
        run([sys.executable, str(WORKER), "one-process", phase, str(tmp_path)], timeout=90, check=True)
    names = assert_same_finish(tmp_path)
    assert any(n.startswith("mp") for n in names) and any(n.startswith("dp") for n in names)


@pytest.mark.timeout(300)
def test_multi_process_strategies_resume_exactly(tmp_path):
    for phase in ("first", "second"):
        torchrun(WORKER, "multi", phase, str(tmp_path), nproc=2, timeout=140, check=True)
    names = assert_same_finish(tmp_path)
    assert {n.split("-")[0] for n in names} == {"ddp", "hybrid", "pipeline", "fsdp"}
    sharded = [n for n in names if "layout=sharded" in n]
    assert sharded and all((tmp_path / n / "checkpoints" / "step-00000004" / "shards" / ".metadata").is_file()
                           for n in sharded)


def test_pipeline_checkpoint_holds_every_stage(tmp_path):
    """The bug this replaces: a pipeline saved only stage 0 and could not be resumed."""
    out = tmp_path / "pc"
    done = scaletrain("train", "--strategy", "pipeline", "--nproc-per-node", "2", "--workload", "digits-mlp",
                      "--epochs", "1", "--checkpoint-every", "20", "--out", str(out), timeout=150)
    assert done.returncode == 0, done.stderr
    latest = sorted((out / "checkpoints").glob("step-*"))[-1]
    keys = set(load_state(latest / "state.pt")["model"])
    assert {"fc1.1.weight", "fc4.weight"} <= keys  # the first stage's and the last stage's blocks
    again = scaletrain("train", "--strategy", "pipeline", "--nproc-per-node", "2", "--workload", "digits-mlp",
                       "--epochs", "2", "--checkpoint-every", "20", "--resume", "auto", "--out", str(out),
                       timeout=150)
    assert again.returncode == 0, again.stderr
    assert "resumed from" in again.stdout


def test_checkpoint_of_another_model_is_refused_before_start(tmp_path):
    first = tmp_path / "cnn"
    done = scaletrain("train", "--workload", "digits-cnn", "--nproc-per-node", "1", "--epochs", "1",
                      "--checkpoint-every", "50", "--out", str(first), timeout=120)
    assert done.returncode == 0, done.stderr
    second = tmp_path / "mlp"
    refused = scaletrain("train", "--workload", "digits-mlp", "--nproc-per-node", "1", "--epochs", "1",
                         "--resume", str(first), "--out", str(second), timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "written for another model" in refused.stderr and "Traceback" not in refused.stderr
    assert not second.exists()
    accum = scaletrain("train", "--workload", "digits-cnn", "--nproc-per-node", "1", "--epochs", "1",
                       "--grad-accum", "2", "--resume", str(first), "--out", str(second), timeout=60)
    assert accum.returncode == 2 and "--grad-accum 1" in accum.stderr, accum.stderr
    assert not second.exists()
