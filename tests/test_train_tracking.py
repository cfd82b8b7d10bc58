"""Runs users can watch, repeat and compare, end to end through `scaletrain train`:
trackers read back with each tool's own reader, step lines in a log file, a run repeated
from its config.yaml, `scaletrain report` on two runs, and a resume that records no step or
epoch twice."""

from __future__ import annotations

import glob
import json
import re
from pathlib import Path

import pytest

from .helpers import run, scaletrain, test_env
from .wandb_history import config as wandb_config, history as wandb_history

EVERY = 5
STEPS_PER_EPOCH = 23  # 1,437 training digits / (2 processes × batch 32), the last batch short


def _records(out: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def _own_trackers_env() -> dict:
    """No tracker settings of whoever runs the tests: W&B offline, MLflow into the run's folder."""
    env = test_env()
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        env.pop(var, None)
    return env


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """Two processes, two epochs, every tracker, settings from a TOML file that a flag overrides;
    stdout is a pipe, as under nohup, Slurm or `> log.txt`."""
    folder = tmp_path_factory.mktemp("tracked")
    (folder / "run.toml").write_text(f'epochs = 3\nseed = 5\nlog_every_steps = {EVERY}\n'
                                     'tracker = ["tensorboard", "mlflow", "wandb", "csv"]\n')
    out = folder / "run"
    result = scaletrain("train", "--config", str(folder / "run.toml"), "--epochs", "2", "--nproc-per-node", "2",
                        "--out", str(out), timeout=280, env=_own_trackers_env())
    assert result.returncode == 0, result.stderr + result.stdout
    return out, result


@pytest.mark.timeout(300)
def test_log_file_gets_plain_step_lines_during_the_first_epoch(tracked):
    out, result = tracked
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", result.stdout)  # no escape codes, no carriage returns
    lines = result.stdout.splitlines()
    first_epoch = next(i for i, line in enumerate(lines) if line.startswith("epoch   1/2"))
    step_lines = [line for line in lines[:first_epoch] if line.startswith("step ")]
    assert len(step_lines) == STEPS_PER_EPOCH // EVERY
    assert re.match(rf"step +{EVERY}/{2 * STEPS_PER_EPOCH}  epoch 1/2  loss \d+\.\d{{4}}  lr 0.002  [\d,]+ samples/s"
                    r"  MFU [\d.]+%  ETA \d+", step_lines[0]), step_lines[0]


@pytest.mark.timeout(300)
def test_metrics_jsonl_holds_step_and_epoch_records(tracked):
    out, _ = tracked
    steps = _records(out, "step")
    assert [r["step"] for r in steps] == list(range(EVERY, 2 * STEPS_PER_EPOCH + 1, EVERY))
    assert all(r["train_loss"] > 0 and r["samples_per_second"] > 0 and r["lr"] == 0.002 for r in steps)
    assert [r["wall_seconds"] for r in steps] == sorted(r["wall_seconds"] for r in steps)
    epochs = _records(out, "epoch")
    assert [(r["epoch"], r["step"]) for r in epochs] == [(1, STEPS_PER_EPOCH), (2, 2 * STEPS_PER_EPOCH)]


@pytest.mark.timeout(300)
def test_tensorboard_reader_sees_loss_every_n_steps_and_accuracy_per_epoch(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, _ = tracked
    assert len(glob.glob(str(out / "tensorboard" / "events.out.tfevents.*"))) == 1  # rank 0 only
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == list(range(EVERY, 2 * STEPS_PER_EPOCH + 1, EVERY))
    assert [e.value for e in loss] == pytest.approx([r["train_loss"] for r in _records(out, "step")])
    accuracy = events.Scalars("eval/accuracy")
    assert [(e.step, e.value) for e in accuracy] == [(r["step"], pytest.approx(r["eval_accuracy"]))
                                                      for r in _records(out, "epoch")]
    assert {"train/lr", "train/samples_per_second", "eval/loss"} <= set(events.Tags()["scalars"])
    assert "config" in "".join(events.Tags()["tensors"])


@pytest.mark.timeout(300)
def test_mlflow_client_reads_the_run(tracked, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for it to read a file store
    from mlflow.tracking import MlflowClient

    out, _ = tracked
    client = MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    runs = client.search_runs([client.get_experiment_by_name("scaletrain").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED" and runs[0].info.run_name == "run"
    run_id = runs[0].info.run_id
    loss = client.get_metric_history(run_id, "train/loss")
    assert sorted(m.step for m in loss) == list(range(EVERY, 2 * STEPS_PER_EPOCH + 1, EVERY))
    accuracy = client.get_metric_history(run_id, "eval/accuracy")
    assert [m.value for m in sorted(accuracy, key=lambda m: m.step)] == pytest.approx(
        [r["eval_accuracy"] for r in _records(out, "epoch")])
    params = runs[0].data.params
    assert params["seed"] == "5" and params["epochs"] == "2" and params["world_size"] == "2"
    assert runs[0].data.metrics["summary/final_accuracy"] == pytest.approx(_summary(out)["final_accuracy"])


@pytest.mark.timeout(300)
def test_wandb_offline_run_folder_holds_the_history(tracked):
    out, result = tracked
    files = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1, files  # one offline run, rank 0's
    assert "wandb sync" in result.stdout
    rows = wandb_history(files[0])
    losses = [(row["_step"], row["train/loss"]) for row in rows if "train/loss" in row]
    assert [step for step, _ in losses] == list(range(EVERY, 2 * STEPS_PER_EPOCH + 1, EVERY))
    assert [row["eval/accuracy"] for row in rows if "eval/accuracy" in row] == pytest.approx(
        [r["eval_accuracy"] for r in _records(out, "epoch")])
    assert wandb_config(files[0])["seed"] == 5


@pytest.mark.timeout(300)
def test_csv_tracker_and_recorded_configuration(tracked):
    out, _ = tracked
    rows = (out / "csv" / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,name,value,time" and any(row.startswith(f"{EVERY},train/loss,") for row in rows)
    assert "final_accuracy" in (out / "csv" / "summary.csv").read_text()
    import yaml

    recorded = yaml.safe_load((out / "config.yaml").read_text())
    assert recorded["epochs"] == 2 and recorded["seed"] == 5 and recorded["nproc_per_node"] == 2  # flag over file
    assert recorded["tracker"] == ["tensorboard", "mlflow", "wandb", "csv"] and recorded["lr"] == 0.002
    # Options every strategy takes are recorded though not given; one strategy's own are not.
    assert (recorded["precision"], recorded["grad_accum"], recorded["compile"]) == ("fp32", 1, False)
    assert "microbatches" not in recorded and "grad_compression" not in recorded


@pytest.fixture(scope="module")
def repeated(tracked, tmp_path_factory):
    out = tmp_path_factory.mktemp("repeat") / "again"
    result = scaletrain("train", "--config", str(tracked[0] / "config.yaml"), "--out", str(out), timeout=280,
                        env=_own_trackers_env())
    assert result.returncode == 0, result.stderr + result.stdout
    return out


@pytest.mark.timeout(600)
def test_config_yaml_repeats_the_run_exactly(tracked, repeated):
    first, again = _summary(tracked[0]), _summary(repeated)
    for key in ("final_accuracy", "final_loss", "final_train_loss", "world_size", "seed", "epochs", "lr",
                "global_batch_size"):
        assert again[key] == first[key], key
    assert [r["eval_accuracy"] for r in _records(repeated, "epoch")] == [
        r["eval_accuracy"] for r in _records(tracked[0], "epoch")]


@pytest.mark.timeout(600)
def test_report_draws_two_runs_and_prints_the_table(tracked, repeated, tmp_path):
    result = scaletrain("report", str(tracked[0]), str(repeated), "--out", str(tmp_path / "report"), timeout=120)
    assert result.returncode == 0, result.stderr
    for name in ("loss.png", "heldout.png", "throughput.png"):
        assert (tmp_path / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "report" / "comparison.md").read_text().splitlines()
    assert table[0].startswith("| run | strategy | world size | held-out accuracy | held-out loss | samples/s")
    accuracy = f"{_summary(tracked[0])['final_accuracy']:.4f}"
    assert [row.split(" | ")[:4] for row in table[2:]] == [["| run", "ddp", "2 (1 node × 2)", accuracy],
                                                           ["| again", "ddp", "2 (1 node × 2)", accuracy]]
    assert "again" in result.stdout and accuracy in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--config", "run.yaml"], "--config run.yaml: unknown key 'epoch' (did you mean epochs?); valid keys: strategy,"),
    (["--config", "missing.yaml"], "--config missing.yaml: no such file"),
])
def test_bad_config_is_one_line_exit_2_nothing_written(tmp_path, args, message):
    (tmp_path / "run.yaml").write_text("epoch: 3\n")
    result = scaletrain("train", *args, "--out", "out", cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith(f"scaletrain: error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_missing_tracker_package_is_one_line_naming_the_extra(tmp_path):
    # Python's own way to make an import fail: a None entry in sys.modules.
    code = "import sys; sys.modules['wandb'] = None; from scaletrain.cli import main; sys.exit(main(sys.argv[1:]))"
    result = run([__import__("sys").executable, "-c", code, "train", "--tracker", "wandb", "--out", "out"],
                 timeout=60, cwd=tmp_path)
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert result.stderr.strip() == ("scaletrain: error: tracker 'wandb' needs the wandb package, which is not "
                                     "installed; install it with: pip install 'scaletrain[wandb]'")


@pytest.mark.timeout(300)
def test_resume_records_no_step_or_epoch_twice(tmp_path):
    """A run resumed from its final checkpoint goes back into its last epoch (all of its
    batches done): that epoch keeps its one record, and the steps their one record each."""
    out = tmp_path / "run"
    flags = ["--workload", "digits-mlp", "--nproc-per-node", "1", "--checkpoint-every", "1000", "--out", str(out),
             "--log-every-steps", "10", "--tracker", "tensorboard", "--tracker", "csv"]
    assert scaletrain("train", "--epochs", "1", *flags, timeout=120).returncode == 0
    first = _records(out, "epoch")
    (out / "summary.json").unlink()  # as if killed after its last checkpoint, before the summary
    resumed = scaletrain("train", "--epochs", "2", "--resume", "auto", *flags, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
    epochs, steps = _records(out, "epoch"), [r["step"] for r in _records(out, "step")]
    assert epochs[0] == first[0] and [r["epoch"] for r in epochs] == [1, 2]
    assert epochs[1]["resumed_at_step"] == 45
    assert steps == list(range(10, 91, 10))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == steps  # the steps after the checkpoint once
    assert [e.step for e in events.Scalars("eval/accuracy")] == [45, 90]
    rows = [row.split(",")[:2] for row in (out / "csv" / "metrics.csv").read_text().splitlines()[1:]]
    assert [int(step) for step, name in rows if name == "train/loss"] == steps


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path):
    result = scaletrain("report", str(tmp_path), "--out", str(tmp_path / "report"), timeout=60)
    assert result.returncode == 2 and not (tmp_path / "report").exists()
    assert result.stderr.strip() == (f"scaletrain: error: {tmp_path} holds no metrics.jsonl: not a `scaletrain "
                                     "train` run folder (or it has not finished an epoch or a step record yet)")


def test_a_tracking_server_that_is_down_is_found_in_seconds_and_the_user_chooses(tmp_path):
    """MLFLOW_TRACKING_URI naming a server that is down: refused in one line before anything
    starts (MLflow's client would retry for minutes), or, when asked, a run without it."""
    import time

    env = {**_own_trackers_env(), "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}
    flags = ["train", "--workload", "digits-mlp", "--epochs", "1", "--nproc-per-node", "1", "--tracker", "mlflow",
             "--tracker", "csv"]
    started = time.monotonic()
    refused = scaletrain(*flags, "--out", str(tmp_path / "stop"), timeout=60, env=env)
    assert refused.returncode == 2 and time.monotonic() - started < 30, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "tracking server at http://127.0.0.1:9" in lines[0], refused.stderr
    assert "--if-tracker-unreachable skip" in lines[0] and not (tmp_path / "stop").exists()
    skipped = scaletrain(*flags, "--if-tracker-unreachable", "skip", "--out", str(tmp_path / "skip"), timeout=120,
                         env=env)
    assert skipped.returncode == 0, skipped.stderr
    assert "training without the mlflow tracker" in skipped.stderr
    assert (tmp_path / "skip" / "csv" / "metrics.csv").is_file() and not (tmp_path / "skip" / "mlruns").exists()


def test_report_skips_a_record_that_is_not_numbers_and_names_its_line(tmp_path, capsys):
    """A metrics.jsonl edited by hand: `"train_loss": "abc"` is named and left out, the rest drawn."""
    from scaletrain.cli import main

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    epoch = {"kind": "epoch", "epochs": 2, "eval_accuracy": 0.5, "eval_samples": 10, "samples_per_second": 100.0,
             "epoch_seconds": 1.0, "lr": 0.1}
    (run_dir / "metrics.jsonl").write_text(
        json.dumps({**epoch, "epoch": 1, "step": 5, "train_loss": 1.5, "eval_loss": 1.2, "wall_seconds": 1.0}) + "\n"
        + json.dumps({**epoch, "epoch": 2, "step": 10, "train_loss": "abc", "eval_loss": "abc", "wall_seconds": 2}))
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    assert err.strip() == f"scaletrain: note: skipped line 2 of {run_dir / 'metrics.jsonl'}: train_loss is 'abc', " \
                          "not a number"
    assert (tmp_path / "report" / "comparison.md").is_file()
    # A run stopped before its end has no summary.json: its strategy and processes come from
    # its config.yaml (not '?').
    (run_dir / "config.yaml").write_text("strategy: fsdp\nnproc_per_node: 2\nnnodes: null\n")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    row = (tmp_path / "report" / "comparison.md").read_text().splitlines()[2]
    assert row.split(" | ")[1:3] == ["fsdp", "2 (1 node × 2)"], row


def test_under_mpirun_a_log_file_gets_plain_lines_not_the_bar(tmp_path):
    """mpirun hands its ranks a pseudo-terminal even when its own output is a file: what
    counts is the command's output, so `> file` gets plain step lines and no control codes."""
    result = scaletrain("train", "--launcher", "mpirun", "--workload", "digits-mlp", "--epochs", "1",
                        "--nproc-per-node", "2", "--log-every-steps", "5", "--out", str(tmp_path / "run"),
                        timeout=180)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\r" not in result.stdout, repr(result.stdout[:500])
    assert re.search(r"^step\s+5/", result.stdout, re.M), result.stdout


@pytest.mark.parametrize("damage,words", [
    ("epoch written as 1.0", None),
    ("summary values that are text", "left out final_accuracy of"),
    ("summary that is a list", "it holds a list, not a run's summary"),
    ("metrics.jsonl that is a folder", "metrics.jsonl is a folder"),
])
def test_report_reads_damaged_run_folders_without_a_traceback(tmp_path, capsys, damage, words):
    """Files edited by hand or by another program: the table is drawn from what is right, and
    what is not is named; a file that is not a file is one line (exit 2)."""
    from scaletrain.cli import main

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    summary = {"strategy": "ddp", "world_size": 2, "final_accuracy": 0.9, "final_loss": 0.3,
               "samples_per_second": 100.0, "wall_seconds": 3.0}
    epoch = {"kind": "epoch", "epoch": 1, "step": 10, "train_loss": 1.0, "eval_loss": 0.9, "eval_accuracy": 0.5,
             "wall_seconds": 1.0, "samples_per_second": 10.0}
    if damage == "epoch written as 1.0":
        epoch["epoch"] = 1.0
    elif damage == "summary values that are text":
        summary.update(final_accuracy="0.9", samples_per_second="fast", world_size="two")
    elif damage == "summary that is a list":
        summary = [1, 2, 3]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    if damage == "metrics.jsonl that is a folder":
        (run_dir / "metrics.jsonl").mkdir()
    else:
        (run_dir / "metrics.jsonl").write_text(json.dumps(epoch) + "\n")
    code = main(["report", str(run_dir), "--out", str(tmp_path / "report")])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if damage == "metrics.jsonl that is a folder":
        assert code == 2 and captured.err.count("\n") == 1 and words in captured.err, captured.err
        assert not (tmp_path / "report").exists()
        return
    assert code == 0, captured.err
    table = (tmp_path / "report" / "comparison.md").read_text()
    assert "| run |" in table and "| 1 |" in table, table  # the epoch column, as a whole number
    if words:
        assert words in captured.err, captured.err


class _Server:
    """A local HTTP server that answers as told: "frozen" (accepts, never answers), "html" (200
    with a page, not MLflow), "mlflow" (MLflow's JSON error for an unknown experiment), or
    "mlflow-then-frozen" (that answer to GET, nothing to anything else)."""

    def __init__(self, mode: str):
        import socket
        import threading

        self.mode, self.sock = mode, socket.create_server(("127.0.0.1", 0))
        self.port, self.held = self.sock.getsockname()[1], []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.mode == "frozen":
                continue
            request = conn.recv(65536)
            if self.mode == "mlflow-then-frozen" and not request.startswith(b"GET"):
                continue
            body = b"<html>hello</html>" if self.mode == "html" else \
                b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}'
            status = b"200 OK" if self.mode == "html" else b"404 Not Found"
            conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                         % (len(body), body))
            conn.close()

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("mode,words", [("frozen", "accepts connections but sent no answer within 5 s"),
                                        ("html", "answered HTTP 200 with '<html>hello</html>', not MLflow's JSON"),
                                        ("mlflow", None)])
def test_a_tracking_server_that_never_answers_or_is_not_mlflow_is_found_in_seconds(mode, words):
    """A frozen server (or a port-forward to a pod that is gone) once passed the check and left
    the run silent for minutes; a server that is not MLflow ended in MLflow's traceback."""
    import time

    from scaletrain.track.mlflow_tracker import server_problem

    server = _Server(mode)
    try:
        started = time.monotonic()
        found = server_problem({"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{server.port}"})
        assert time.monotonic() - started < 8
    finally:
        server.close()
    assert (found is None) if words is None else (words in found), found


def test_a_tracking_server_that_stops_answering_as_the_run_opens_is_one_line_in_seconds(tmp_path, monkeypatch):
    """It answered the check, then not the run's first requests: bounded, one line."""
    import time

    from scaletrain.foundation.errors import UsageError
    from scaletrain.track.mlflow_tracker import MlflowTracker

    server = _Server("mlflow-then-frozen")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.port}")
    try:
        started = time.monotonic()
        with pytest.raises(UsageError) as refused:
            MlflowTracker(tmp_path, "run")
        took = time.monotonic() - started
    finally:
        server.close()
    assert took < 30, took
    assert "did not take the run's first requests" in str(refused.value) and "\n" not in str(refused.value)
