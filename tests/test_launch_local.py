"""`scaletrain launch` on this machine: the plain torch.distributed example under spawn,
torchrun and Open MPI; a failing rank reported first with nothing left behind; and the
mistakes that used to hang, each failing in one line within 60 seconds."""

import json
import shutil
import socket
import sys
import time

import pytest

from .helpers import test_env as child_env
from .launch_helpers import EXAMPLE, FAIL_SCRIPT, first_user_exception, launch_argv, run_session

LAUNCHERS = ["spawn", "torchrun", "mpirun"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_plain_torch_distributed_example(launcher, tmp_path):
    out = tmp_path / "summary.json"
    result, left = run_session(launch_argv("--launcher", launcher, "--nproc-per-node", "2", str(EXAMPLE),
                                           "--steps", "3", "--out", str(out)), timeout=150)
    assert result.returncode == 0, result.stderr
    assert not left, f"{launcher} left processes behind: {left}"
    summary = json.loads(out.read_text())
    assert summary["world_size"] == 2 and summary["in_sync"] is True
    assert result.stdout.count("rank ") >= 2  # both ranks printed their line


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_failing_rank_is_reported_first(launcher):
    started = time.monotonic()
    result, left = run_session(launch_argv("--launcher", launcher, "--nproc-per-node", "2", str(FAIL_SCRIPT), "1"),
                               timeout=150)
    assert result.returncode != 0
    assert not left, f"{launcher} left processes behind: {left}"
    err = result.stderr
    # The first traceback through the user's script is rank 1's, and the launcher names it first.
    assert first_user_exception(err, FAIL_SCRIPT.name) == "ValueError: boom on rank 1", err
    first_line = next(line for line in err.splitlines() if "failed first" in line)
    assert first_line.startswith("scaletrain: rank 1 on host ") and "ValueError: boom on rank 1" in first_line
    assert err.index(first_line) < err.index("raise ValueError", err.index(first_line))
    assert time.monotonic() - started < 120


def one_line_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("scaletrain: error: ")
    return lines[0]


def timed(argv, env=None):
    started = time.monotonic()
    result, left = run_session(argv, timeout=60, env=env)
    assert not left
    return result, time.monotonic() - started


def test_port_in_use_names_another_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result, seconds = timed(launch_argv("--nproc-per-node", "2", "--master-port", str(port), str(EXAMPLE)))
    line = one_line_error(result)
    assert f"port {port} is already in use" in line and "--master-port" in line and seconds < 60


def test_hostfile_without_slots(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts, no slot counts\nnode-a\nnode-b\n")
    result, seconds = timed(launch_argv("--launcher", "mpirun", "--hostfile", str(hostfile), str(EXAMPLE)))
    line = one_line_error(result)
    assert "gives no slots" in line and "slots=N" in line and "--nproc-per-node" in line and seconds < 60


def test_mpirun_not_installed(tmp_path):
    assert shutil.which("mpirun"), "Open MPI (openmpi-bin) must be installed for this test's counterpart"
    env = child_env(PATH=str(tmp_path))  # a PATH without mpirun; python is run by its full path
    result, seconds = timed(launch_argv("--launcher", "mpirun", "--nproc-per-node", "2", str(EXAMPLE)), env=env)
    line = one_line_error(result)
    assert "mpirun was not found on PATH" in line and "openmpi-bin" in line and seconds < 60


def test_launch_refuses_a_missing_script():
    result, _ = timed(launch_argv("--nproc-per-node", "2", "no_such_script.py"))
    assert "no_such_script.py does not exist" in one_line_error(result)


def test_sbatch_writes_a_batch_script(tmp_path):
    path = tmp_path / "job.sh"
    result, _ = timed(launch_argv("--launcher", "srun", "--nproc-per-node", "2", "--nnodes", "2",
                                  "--sbatch", str(path), str(EXAMPLE)))
    assert result.returncode == 0, result.stderr
    text = path.read_text()
    assert text.startswith("#!/bin/bash") and "#SBATCH --nodes=2" in text and "srun --nodes 2" in text


def test_spawn_from_python_like_a_notebook(tmp_path):
    out = tmp_path / "summary.json"
    code = ("import sys; from scaletrain.launchers.facade import run_script; "
            f"sys.exit(run_script({str(EXAMPLE)!r}, '--steps', '2', '--out', {str(out)!r}, nproc=2))")
    result, left = run_session([sys.executable, "-c", code], timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["world_size"] == 2 and not left
