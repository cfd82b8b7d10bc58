"""An output folder belongs to one run at a time, and `--resume auto` continues only a run
that can be continued: a second run on a live run's --out is refused naming the holder; a
killed run resumes in its own folder (the lock died with it); a finished run's folder is
refused without a byte changed. Also: a ddp checkpoint resumes under the pipeline strategy."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scaletrain.checkpoint import load_state
from tests.helpers import scaletrain, test_env

MLP = ["train", "--workload", "digits-mlp", "--batch-size", "8"]


def files_of(out: Path) -> dict:
    """Every file under `out` with its bytes and modification time: what "nothing written" compares."""
    return {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*"))
            if p.is_file()}


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("scaletrain") and "error:" in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


def wait_for(path: Path, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path} did not appear within {seconds} s"
        time.sleep(0.2)


@pytest.mark.timeout(400)
def test_one_run_per_folder_a_killed_run_resumes_and_a_finished_one_is_kept(tmp_path):
    out = tmp_path / "run"
    out.mkdir()  # an empty folder counts as new, and is held like one
    flags = [*MLP, "--nproc-per-node", "2", "--checkpoint-every", "5", "--out", str(out)]
    first = subprocess.Popen([sys.executable, "-m", "scaletrain", *flags, "--epochs", "200"], env=test_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(out / "checkpoints" / "latest", first, 150)
        assert (out / ".scaletrain.lock").read_text().split() == [str(first.pid), socket.gethostname()]
        record = out / "config.yaml"  # the run's other files change as it trains
        before = (record.read_bytes(), record.stat().st_mtime_ns)
        for extra in ([], ["--resume", "auto"]):  # the same command, and a resume of the live run
            line = one_error_line(scaletrain(*flags, "--epochs", "200", *extra, timeout=90))
            assert f"is in use by another run (pid {first.pid} on host {socket.gethostname()})" in line, line
        assert first.poll() is None, "the first run was disturbed"
        assert (record.read_bytes(), record.stat().st_mtime_ns) == before, "the refused run wrote into the folder"
    finally:
        os.kill(first.pid, signal.SIGKILL)  # the launcher alone, as `kill -9` or the out-of-memory killer would
        _, killed_err = first.communicate(timeout=60)  # the ranks see it gone and end: their stderr closes
    # Each rank says so in one line; none prints torch's C++ stack trace of the closed store first.
    assert killed_err.count("is gone; stopping this rank") == 2, killed_err[-3000:]
    assert "Exception raised from" not in killed_err and "frame #" not in killed_err, killed_err[-3000:]

    # The killed run's lock died with it: its own --resume continues.
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    # To the end of the epoch after the one it was in: a checkpoint may fall on an epoch's last step.
    epochs = load_state(latest / "state.pt")["progress"]["loader"]["epoch"] + 2
    resumed = scaletrain(*flags, "--epochs", str(epochs), "--resume", "auto", timeout=150)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and (out / "summary.json").is_file()

    # Finished: the same --resume auto would only rewrite it.
    finished = files_of(out)
    line = one_error_line(scaletrain(*flags, "--epochs", str(epochs), "--resume", "auto", timeout=90))
    assert f"already ended its {epochs} epoch(s)" in line and f"--epochs {epochs + 1}" in line, line
    assert files_of(out) == finished

    # Checkpoints hold the whole model whatever the strategy: ddp's resumes as a pipeline of 2 stages.
    piped = tmp_path / "piped"
    again = scaletrain(*MLP, "--strategy", "pipeline", "--nproc-per-node", "2", "--epochs", str(epochs + 1),
                       "--resume", str(out), "--out", str(piped), timeout=150)
    assert again.returncode == 0, again.stderr
    assert "resumed from" in again.stdout and "saved under strategy ddp, now pipeline" in again.stderr + again.stdout
    assert (piped / "summary.json").is_file()


@pytest.mark.timeout(200)
def test_resume_auto_refuses_a_finished_run_without_checkpoints(tmp_path):
    out = tmp_path / "done"
    done = scaletrain(*MLP, "--nproc-per-node", "1", "--epochs", "1", "--out", str(out), timeout=90)
    assert done.returncode == 0, done.stderr
    finished = files_of(out)
    line = one_error_line(scaletrain(*MLP, "--nproc-per-node", "1", "--epochs", "1", "--out", str(out),
                                     "--resume", "auto", timeout=90))
    assert "holds a finished run (summary.json written) and no checkpoint" in line, line
    assert files_of(out) == finished


@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_a_closed_terminal_stops_the_run_with_its_ranks_and_frees_the_folder(tmp_path, launcher):
    """SIGHUP to `scaletrain train` (a closed terminal, a dropped ssh session): the run stops
    like under SIGTERM, ranks first, so nothing writes into the folder a resume then takes."""
    from tests.launch_helpers import finish_marked, marked, start_marked

    out = tmp_path / "HU"
    flags = [*MLP, "--nproc-per-node", "2", "--launcher", launcher, "--log-every-steps", "1", "--out", str(out)]
    proc, token = start_marked([sys.executable, "-m", "scaletrain", *flags, "--epochs", "300"])
    deadline = time.monotonic() + 120
    while not proc.stdout.readline().startswith("step"):  # training, on both ranks
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
    ranks = set(marked(token)) - {proc.pid}
    os.kill(proc.pid, signal.SIGHUP)
    proc.wait(timeout=60)
    still = ranks & set(marked(token))
    result, left = finish_marked(proc, token, timeout=10, grace=0.5)
    assert result.returncode == 129, result.stderr[-3000:]
    assert not still and not left, "ranks outlived the launcher"
    assert "Traceback" not in result.stderr, result.stderr
    if launcher == "spawn":  # the folder is free (its lock is held as long as a rank writes): a resume runs
        resumed = scaletrain(*flags, "--epochs", "1", "--resume", "auto", timeout=120)
        assert resumed.returncode == 0, resumed.stderr
