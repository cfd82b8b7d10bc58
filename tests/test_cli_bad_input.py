"""Bad input across the command line: each case gives ONE line on stderr
(`scaletrain: error: …`), exit status 2, no traceback, and nothing half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.helpers import in_process, scaletrain

# A quick, valid base; each case's own flags come after it and win (argparse: last one counts).
BASE = ["train", "--workload", "digits-mlp", "--epochs", "1", "--nproc-per-node", "1"]


def _file(tmp: Path) -> str:
    (tmp / "a-file").write_text("x")
    return str(tmp / "a-file")


def _full_folder(tmp: Path) -> str:
    (tmp / "full").mkdir()
    (tmp / "full" / "keep.txt").write_text("mine")
    return str(tmp / "full")


def _empty_folder(tmp: Path) -> str:
    (tmp / "empty").mkdir()
    return str(tmp / "empty")


def _with_checksums(folder: Path) -> None:
    from scaletrain.checkpoint.checksums import CHECKSUM_FILE, file_checksum

    (folder / CHECKSUM_FILE).write_text(json.dumps({"state.pt": file_checksum(folder / "state.pt")}))


def _corrupt_checkpoint(tmp: Path) -> str:
    folder = tmp / "ckpt" / "step-00000003"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(os.urandom(256))
    _with_checksums(folder)
    (folder / "state.pt").write_bytes(os.urandom(256))  # changed on disk after it was written
    (folder / "COMPLETE").write_text("3\n")
    return str(folder)


def _foreign_checkpoint(tmp: Path) -> str:
    folder = tmp / "other" / "step-00000003"
    folder.mkdir(parents=True)
    torch.save({"weights": torch.zeros(2)}, folder / "state.pt")  # loads, but is not ours
    _with_checksums(folder)
    (folder / "COMPLETE").write_text("3\n")
    return str(folder)


LAUNCHED_ALONE = {"RANK": "0", "WORLD_SIZE": "1", "SCALETRAIN_LAUNCHER": "env"}

# (id, argv after BASE (or a whole command line when it starts with "!"), environment, expected words)
CASES = [
    ("unknown-strategy", ["--strategy", "warp"], {}, "invalid choice"),
    ("nproc-zero", ["--nproc-per-node", "0"], {}, "must be at least 1"),
    ("nproc-text", ["--nproc-per-node", "two"], {}, "expected a whole number"),
    ("single-on-two", ["--strategy", "single", "--nproc-per-node", "2"], {}, "use --nproc-per-node 1"),
    ("nccl-without-cuda", ["--backend", "nccl"], {}, "backend 'nccl'"),
    ("backend-unknown", ["--backend", "smoke"], {}, "invalid choice"),
    ("device-cuda-missing", ["--device", "cuda"], {}, "no CUDA device"),
    ("device-unknown", ["--device", "tpu"], {}, "unknown device"),
    ("float8-on-cpu", ["--precision", "float8"], {}, "on GPUs with float8 hardware (compute capability 8.9"),
    ("workload-unknown", ["--workload", "imagenet"], {}, "invalid choice"),
    ("model-not-importable", ["--model", "no_such_module_xyz:build"], {}, "cannot import"),
    ("model-no-colon", ["--model", "just_a_name"], {}, "expected module:function"),
    ("model-missing-function", ["--model", "os:no_such_function"], {}, "has no function"),
    ("model-not-a-module", ["--model", "os:getcwd"], {}, "not a torch.nn.Module"),
    ("dataset-not-importable", ["--dataset", "no_such_module_xyz:data"], {}, "cannot import"),
    ("dataset-empty-training-split", ["--dataset", "tests.workers.diverging:empty_training_split"], {},
     "its training split is empty"),
    ("tracking-server-down", ["--tracker", "mlflow"], {"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
     "cannot be reached"),
    ("out-not-writable", ["--out", "/proc/scaletrain-out/run"], {}, "--out"),
    ("out-is-a-file", ["--out", _file], {}, "is a file"),
    ("out-not-empty", ["--out", _full_folder], {}, "already holds files"),
    ("epochs-zero", ["--epochs", "0"], {}, "must be at least 1"),
    ("batch-size-negative", ["--batch-size", "-4"], {}, "must be at least 1"),
    ("eval-batch-size-zero", ["--eval-batch-size", "0"], {}, "must be at least 1"),
    ("lr-zero", ["--lr", "0"], {}, "greater than 0"),
    ("lr-text", ["--lr", "fast"], {}, "expected a number"),
    ("seed-text", ["--seed", "lucky"], {}, "expected a whole number"),
    ("threads-zero", ["--threads", "0"], {}, "must be at least 1"),
    ("checkpoint-every-zero", ["--checkpoint-every", "0"], {}, "must be at least 1"),
    ("checkpoint-every-text", ["--checkpoint-every", "often"], {}, "expected a whole number"),
    ("keep-checkpoints-zero", ["--keep-checkpoints", "0"], {}, "must be at least 1"),
    ("checkpoint-async-alone", ["--checkpoint-async"], {}, "without --checkpoint-every there are none"),
    ("resume-empty", ["--resume", " "], {}, "expected auto or a checkpoint path"),
    ("resume-missing-path", ["--resume", "/no/such/checkpoint"], {}, "no such file or folder"),
    ("resume-no-checkpoint", ["--resume", _empty_folder], {}, "no complete checkpoint"),
    ("resume-corrupt", ["--resume", _corrupt_checkpoint], {}, "does not match its checksum"),
    ("resume-not-ours", ["--resume", _foreign_checkpoint], {}, "is not a checkpoint this version of scaletrain reads"),
    ("timeout-text", ["--timeout", "soon"], {}, "expected a duration"),
    ("timeout-zero", ["--timeout", "0"], {}, "longer than 0"),
    ("timeout-negative", ["--timeout=-5m"], {}, "expected a duration"),
    ("timeout-unknown-unit", ["--timeout", "2d"], {}, "expected a duration"),
    ("max-restarts-negative", ["--max-restarts", "-1"], {}, "must be 0 or more"),
    ("max-restarts-text", ["--max-restarts", "many"], {}, "expected a whole number"),
    ("launched-checkpoints-without-out", ["--checkpoint-every", "5"], LAUNCHED_ALONE, "need a fixed --out"),
    ("launcher-rank-not-a-number", [], {"RANK": "first", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
     "is not a whole number"),
    ("launcher-without-master", [], {"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR is not"),
    ("unknown-flag", ["--go-faster"], {}, "unrecognized arguments"),
    ("unknown-command", ["!", "fly"], {}, "invalid choice"),
    ("doctor-port-too-big", ["!", "doctor", "--master-port", "70000"], {}, "at most 65535"),
    ("doctor-nnodes-zero", ["!", "doctor", "--nnodes", "0"], {}, "must be at least 1"),
    ("doctor-node-rank-outside", ["!", "doctor", "--nnodes", "2", "--node-rank", "5", "--no-self-test"], {},
     "--node-rank 5 must be from 0 to 1"),
    ("doctor-timeout-text", ["!", "doctor", "--self-test-timeout", "later"], {}, "expected a duration"),
    ("seed-negative", ["--seed=-1"], {}, "from 0 to 4294967295"),
    ("seed-too-big", ["--seed", "99999999999999999999"], {}, "from 0 to 4294967295"),
    ("train-port-too-big", ["--master-port", "70000"], {}, "at most 65535, got 70000"),
    ("launch-port-too-big", ["!", "launch", "--master-port", "70000", "examples/plain_ddp.py"], {}, "at most 65535"),
    ("launch-abbreviated-flag", ["!", "launch", "--nproc", "2", "examples/plain_ddp.py"], {},
     "unrecognized arguments: --nproc"),
    ("spawn-master-addr-elsewhere", ["--nproc-per-node", "2", "--master-addr", "10.1.2.3"], {},
     "is not an address of this host"),
    ("gloo-interface-missing", [], {"GLOO_SOCKET_IFNAME": "eth99"}, "GLOO_SOCKET_IFNAME=eth99 names no interface"),
    ("launch-timeout-text", ["!", "launch", "--timeout", "soon", "examples/plain_ddp.py"], {}, "expected a duration"),
    ("launch-a-folder", ["!", "launch", _empty_folder], {}, "is a folder without __main__.py"),
    ("dry-run-master-addr-elsewhere", ["!", "launch", "--dry-run", "--nproc-per-node", "2", "--master-addr",
                                       "10.1.2.3", "examples/plain_ddp.py"], {}, "is not an address of this host"),
]

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
                "GROUP_WORLD_SIZE", "SCALETRAIN_LAUNCHER", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def build_argv(args: list, tmp: Path) -> tuple[list[str], Path | None]:
    args = [a(tmp) if callable(a) else a for a in args]
    if args[:1] == ["!"]:
        return args[1:], None
    out = tmp / "out"
    if "--out" in args or "RANK" in os.environ:
        return [*BASE, *args], None
    return [*BASE, "--out", str(out), *args], out


def test_at_least_25_kinds():
    assert len({case[0] for case in CASES}) == len(CASES) >= 25


@pytest.mark.parametrize("name,args,environ,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, args, environ, expected, tmp_path, capsys, monkeypatch):
    for var in _LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in environ.items():
        monkeypatch.setenv(var, value)
    argv, out = build_argv(args, tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    status, stdout, err = in_process(capsys, *argv)
    lines = err.strip().splitlines()
    assert status == 2, (stdout, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("scaletrain") and "error:" in lines[0], lines[0]
    assert expected in lines[0], lines[0]
    assert "Traceback" not in err + stdout
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before, "something was written"
    assert out is None or not out.exists()


@pytest.mark.parametrize("args", [["train", "--strategy", "warp"], ["train", "--timeout", "soon"],
                                  ["train", "--resume", "/no/such/checkpoint"]], ids=["strategy", "timeout", "resume"])
def test_bad_input_from_the_real_command(args, tmp_path):
    """The same, through the installed entry point in a fresh process."""
    result = scaletrain(*args, "--out", str(tmp_path / "out"), timeout=120)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_sequences_of_different_lengths_are_checked_before_training_and_evaluated_one_by_one(tmp_path):
    """A user's unpadded sequences: batches of them cannot be stacked — refused before training;
    one at a time they train, and the held-out set is evaluated one by one too (it failed at the
    first evaluation, after the epoch's training, batched by --eval-batch-size)."""
    data = ["--model", "tests.workers.diverging:pooled", "--dataset", "tests.workers.diverging:ragged_sequences",
            "--nproc-per-node", "1", "--epochs", "1"]
    refused = scaletrain("train", *data, "--batch-size", "4", "--out", str(tmp_path / "batched"), timeout=120)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "training samples differ in shape (sample 0 holds (3,), sample 1 holds (4,))" in lines[0], lines[0]
    assert "--batch-size 1" in lines[0] and not (tmp_path / "batched").exists()
    done = scaletrain("train", *data, "--batch-size", "1", "--out", str(tmp_path / "one"), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "evaluated one at a time, not in batches of 256" in done.stdout + done.stderr
    # The run's first line names what trains: the user's model on the user's data (not "digits-cnn (model …)").
    first = next(line for line in done.stdout.splitlines() if " on 1 process(es) × " in line)
    assert "; model tests.workers.diverging:pooled on dataset tests.workers.diverging:ragged_sequences (" in first, first
    from scaletrain.workloads import get_workload

    assert get_workload("digits-cnn", "m:f").name == "model m:f on digits-cnn's data"
    assert json.loads((tmp_path / "one" / "summary.json").read_text())["eval_samples"] == 16


def test_a_mistake_two_ranks_find_is_one_line_and_leaves_no_folder(tmp_path):
    """The ranks build the data (the command only checks that its factory imports): both find
    the empty training split; the line is shown once, and the folder the run made is gone."""
    out = tmp_path / "out"
    result = scaletrain(*BASE, "--nproc-per-node", "2", "--dataset", "tests.workers.diverging:empty_training_split",
                        "--out", str(out), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "its training split is empty" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_a_resume_refused_for_its_batch_names_each_fix_once():
    """A batch per process that keeps neither the batch per process nor the global batch: the
    value that keeps both is suggested once, not twice; another sequence length is named as such."""
    from scaletrain.checkpoint.compat import compare as marked
    from scaletrain.foundation.errors import as_library

    def compare(saved, now, where):
        refusal, notes = marked(saved, now, where)
        return as_library(refusal) if refusal else None, notes

    saved = {"batch_size": 32, "data_parallel_size": 2, "grad_accum": 1}
    refusal, _ = compare(saved, {**saved, "batch_size": 16}, "ckpt")
    assert refusal.count("batch_size=32") == 2 and "(the same per process and global batch)" in refusal, refusal
    refusal, _ = compare({**saved, "seq_len": 64}, {**saved, "batch_size": 64, "seq_len": 32}, "ckpt")
    assert "seq_len=64" in refusal and "batch_size" not in refusal, refusal
