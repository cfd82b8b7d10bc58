"""The command line end to end: the main job, `env`, and bad input."""

import json
import os

import pytest

from scaletrain.cli import main

from .helpers import in_process, scaletrain


def _summary(out):
    return json.loads((out / "summary.json").read_text())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nproc", [1, 2])
def test_train_digits_reaches_accuracy(tmp_path, nproc):
    out = tmp_path / "run"
    result = scaletrain("train", "--nproc-per-node", str(nproc), "--out", str(out), timeout=280)
    assert result.returncode == 0, result.stderr
    summary = _summary(out)
    assert summary["world_size"] == nproc and summary["nnodes"] == 1
    assert summary["final_accuracy"] >= 0.93
    assert summary["eval_samples"] == 360  # every held-out sample once, whatever the world size
    assert summary["global_batch_size"] == 32 * nproc
    for key in ("strategy", "backend", "epochs", "lr", "final_loss", "samples_per_second", "wall_seconds",
                "torch_version"):
        assert key in summary
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics if m["kind"] == "epoch"] == list(range(1, summary["epochs"] + 1))
    assert f"world size        │ {nproc}" in result.stdout or f"│ {nproc} (1 node" in result.stdout
    epoch_lines = [line for line in result.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epoch_lines) == summary["epochs"]  # rank 0 prints, once per epoch
    # Memory measured: each process's training peak above its baseline (before the model).
    peaks, bases = summary["peak_memory_bytes"], summary["baseline_memory_bytes"]
    assert len(peaks) == len(bases) == nproc and all(p > b > 0 for p, b in zip(peaks, bases))
    assert all(m["memory_bytes"] > 0 for m in metrics if m["kind"] == "step")
    assert "peak memory / process" in result.stdout


USER_FACTORIES = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset

def model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

def dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 1, 8, 8, generator=g)
    return TensorDataset(x, (x.flatten(1)[:, 0] > 0).long())
'''


@pytest.mark.timeout(120)
def test_train_users_own_model_and_dataset(tmp_path):
    (tmp_path / "mine.py").write_text(USER_FACTORIES)
    result = scaletrain("train", "--nproc-per-node", "1", "--model", "mine:model", "--dataset", "mine:dataset",
                        "--epochs", "2", "--out", "run", cwd=tmp_path, timeout=100)
    assert result.returncode == 0, result.stderr
    summary = _summary(tmp_path / "run")
    assert summary["eval_samples"] == 40 and "mine:model" in summary["workload"]


def test_env_reports_detection_and_backends():
    result = scaletrain("env", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "launcher: none" in result.stdout and "gloo" in result.stdout
    facts = json.loads(scaletrain("env", "--json", timeout=60).stdout)
    assert facts["environment"]["world_size"] == 1 and facts["backends"]["gloo"] == "yes"
    assert facts["threads_per_process"] >= 1


def test_env_explains_a_launcher():
    from .helpers import test_env

    env = test_env(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="1",
                   OMPI_COMM_WORLD_LOCAL_SIZE="2")
    facts = json.loads(scaletrain("env", "--json", env=env, timeout=60).stdout)
    assert facts["environment"]["launcher"] == "mpirun" and facts["environment"]["rank"] == 1
    assert facts["environment"]["sources"]["rank"] == "OMPI_COMM_WORLD_RANK"


BAD_INPUT = [
    (["--strategy", "bogus"], "invalid choice: 'bogus'"),
    (["--nproc-per-node", "0"], "--nproc-per-node: must be at least 1"),
    (["--backend", "nccl"], "backend 'nccl' is not usable here"),
    (["--model", "no_such_module:build"], "cannot import 'no_such_module'"),
    (["--model", "nocolon"], "expected module:function"),
    (["--strategy", "single", "--nproc-per-node", "2"], "runs one process"),
    (["--epochs", "-1"], "--epochs: must be at least 1"),
    (["--lr", "zero"], "--lr: expected a number"),
    (["--device", "cuda"], "no CUDA device"),
]


@pytest.mark.parametrize("args, message", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, args, message):
    """In this process (each is refused before anything starts); test_out_that_cannot_be_written
    runs the command as a process of its own."""
    out = tmp_path / "run"
    code, stdout, stderr = in_process(capsys, "train", *args, "--out", str(out))
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], stderr
    assert "Traceback" not in stderr + stdout
    assert not out.exists()


def test_out_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out in (blocker, blocker / "run"):
        result = scaletrain("train", "--out", str(out), timeout=60)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "--out" in result.stderr and "Traceback" not in result.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "summary.json").write_text("{}")
    result = scaletrain("train", "--out", str(busy), timeout=60)
    assert result.returncode == 2 and "already holds files" in result.stderr
    assert (busy / "summary.json").read_text() == "{}"


def test_max_steps_stops_after_n_optimizer_steps(tmp_path, monkeypatch):
    """--max-steps counts optimizer steps (micro-steps ÷ --grad-accum), takes the epochs it needs
    when --epochs is not given, and ends as an epoch ends: evaluation, summary. Called as a
    function, the command never replaces its caller's process (to start again with its allocator)."""
    restarts = []

    def execve(*args):
        restarts.append(args)
        raise OSError("not here")

    monkeypatch.setattr(os, "execve", execve)
    out = tmp_path / "steps"
    assert main(["train", "--nproc-per-node", "1", "--workload", "digits-mlp", "--max-steps", "50", "--grad-accum", "2",
                 "--batch-size", "16", "--log-every-steps", "20", "--out", str(out)]) == 0
    summary = _summary(out)
    assert summary["optimizer_steps"] == 50 and summary["max_steps"] == 50
    assert summary["epochs"] == 2  # 100 micro-steps of 16 from 1,437 samples (90 per epoch): into a second epoch
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in epochs if e["kind"] == "epoch"] == [90, 100]
    assert summary["final_accuracy"] is not None
    assert not restarts, restarts
