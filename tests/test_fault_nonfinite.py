"""Training that goes NaN/inf stops at the next check with one line naming the step and the
likely cause, keeps the last good checkpoint, and writes only strict JSON; with
--allow-nonfinite it goes on, still without checkpoints of non-finite weights. An empty
held-out set is reported as none, not as accuracy 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from scaletrain.checkpoint import load_state
from tests.helpers import scaletrain

MLP = ["train", "--workload", "digits-mlp", "--epochs", "1"]


def strict(text: str):
    """json.loads that refuses NaN and Infinity, as strict readers (and other languages) do."""
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def the_error_line(result) -> str:
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    # The launcher adds nothing to a rank's own one-line error ("rank 0 failed: exited with status 2").
    assert "exited with status" not in result.stderr and "failed" not in result.stderr, result.stderr
    return errors[0]


def metrics(out: Path) -> list:
    path = out / "metrics.jsonl"
    return [strict(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(150)
def test_lr_inf_stops_with_one_line(tmp_path):
    """The command as a user types it (the default digits CNN, on 2 processes)."""
    out = tmp_path / "inf"
    result = scaletrain("train", "--lr", "inf", "--epochs", "1", "--nproc-per-node", "2", "--out", str(out),
                        timeout=120)
    line = the_error_line(result)
    assert "training diverged: the training loss became NaN or inf at step 2" in line, line
    assert "the learning rate (--lr inf) is far too high" in line, line
    assert not (out / "summary.json").exists()
    metrics(out)  # whatever was recorded is strict JSON


@pytest.mark.timeout(150)
def test_a_model_that_overflows_keeps_the_last_good_checkpoint(tmp_path):
    """Finite for 12 steps, inf from step 13: checkpoints at 5 and 10 are written, the one due
    at 15 is not, and the run stops there naming step 13."""
    out = tmp_path / "over"
    result = scaletrain(*MLP, "--nproc-per-node", "2", "--model", "tests.workers.diverging:inf_later",
                        "--checkpoint-every", "5", "--out", str(out), timeout=120)
    line = the_error_line(result)
    assert "the training loss became NaN or inf at step 13" in line, line
    assert "no checkpoint of non-finite weights was written" in line
    checkpoints = out / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "step-00000010"
    assert sorted(p.name for p in checkpoints.glob("step-*")) == ["step-00000005", "step-00000010"]
    state = load_state(checkpoints / "step-00000010" / "state.pt")
    assert all(torch.isfinite(t).all() for t in state["model"].values())


@pytest.mark.timeout(150)
def test_the_first_step_already_inf_blames_the_model(tmp_path):
    result = scaletrain(*MLP, "--nproc-per-node", "1", "--model", "tests.workers.diverging:inf_at_once",
                        "--out", str(tmp_path / "m"), timeout=90)
    line = the_error_line(result)
    assert "at step 1" in line and "the model or the data produce NaN or inf" in line, line


@pytest.mark.timeout(150)
def test_allow_nonfinite_goes_on_with_strict_json_and_no_bad_checkpoint(tmp_path):
    out = tmp_path / "on"
    result = scaletrain(*MLP, "--nproc-per-node", "1", "--lr", "inf", "--allow-nonfinite", "--checkpoint-every", "5",
                        "--out", str(out), timeout=90)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("warning: training diverged") == 1, result.stdout
    assert "no checkpoint at step 5: the weights are not finite" in result.stdout
    assert not list(out.glob("checkpoints/step-*"))
    summary = strict((out / "summary.json").read_text())
    assert summary["final_loss"] is None and "final_loss" in summary["non_finite"]
    epochs = [r for r in metrics(out) if r["kind"] == "epoch"]
    assert epochs and epochs[-1]["train_loss"] is None and "train_loss" in epochs[-1]["non_finite"]


@pytest.mark.timeout(150)
def test_an_empty_held_out_set_is_reported_as_none(tmp_path):
    out = tmp_path / "none"
    result = scaletrain(*MLP, "--nproc-per-node", "1", "--dataset", "tests.workers.diverging:no_held_out",
                        "--out", str(out), timeout=90)
    assert result.returncode == 0, result.stderr
    assert "held-out: none (the held-out set is empty)" in result.stdout
    assert "held-out acc " not in result.stdout and "0.0000" not in result.stdout
    summary = strict((out / "summary.json").read_text())
    assert summary["eval_samples"] == 0 and summary["final_accuracy"] is None and summary["final_loss"] is None
