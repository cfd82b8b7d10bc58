"""The conventions people type: torchrun's underscore spellings, no abbreviations, one unit
rule for durations, `--version`, help without torch, `--dry-run` that never trains,
`--launcher-args` passed through and shown, the Slurm batch script's resources, and
`launch --max-restarts`. Quick: only the last test starts ranks."""

from __future__ import annotations

import sys

import pytest

from scaletrain.foundation.durations import parse_duration

from .helpers import REPO, scaletrain, test_env
from .launch_helpers import EXAMPLE, launch_argv, run_session

SCRIPTS = REPO / "tests" / "scripts"
# A rank of a job torchrun started (LOCAL_RANK set: one of several processes on its node).
TORCHRUN_RANK = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511", "TORCHELASTIC_RUN_ID": "job"}


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "error:" in lines[0] and "Traceback" not in result.stderr
    return lines[0]


def test_torchrun_spelling_works_and_abbreviations_are_refused():
    result = scaletrain("launch", "--nproc_per_node", "2", "--master_port", "29512", "--dry-run", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert "1 node(s) × 2 process(es) = 2 rank(s)" in result.stdout and "MASTER_PORT=29512" in result.stdout
    assert "unrecognized arguments: --nproc" in one_error_line(scaletrain("launch", "--nproc", "2", str(EXAMPLE)))
    assert "unrecognized arguments: --epoch" in one_error_line(scaletrain("train", "--epoch", "1"))


@pytest.mark.parametrize("command", ["launch", "train"])
def test_a_port_above_65535_is_one_line(command):
    assert "at most 65535, got 70000" in one_error_line(scaletrain(command, "--master-port", "70000", str(EXAMPLE)))


def test_version():
    from scaletrain.version import __version__

    result = scaletrain("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"scaletrain {__version__}"


@pytest.mark.parametrize("argv", [["--help"], ["env", "--help"], ["launch", "--help"]])
def test_help_imports_no_torch(argv):
    """What makes help fast (under 1 s here, see docs/launching.md): torch is not imported."""
    code = ("import sys\nfrom scaletrain.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('TORCH', 'torch' in sys.modules)")
    result = run_session([sys.executable, "-c", code, *argv], timeout=60)[0]
    assert result.returncode == 0, result.stderr
    assert "usage: scaletrain" in result.stdout and result.stdout.strip().endswith("TORCH False"), result.stdout


def test_train_command_does_not_import_the_compiler():
    """What keeps `scaletrain train`'s start-up at raw torchrun's (docs/performance.md): the command
    that reads the flags, checks them on a meta model and starts the ranks does not import
    torch._dynamo (over a second on two cores); the ranks import it with DDP, in parallel."""
    code = ("import sys\nfrom scaletrain.cli import main\nmain(sys.argv[1:])\n"
            "print('DYNAMO', 'torch._dynamo' in sys.modules)")
    result = run_session([sys.executable, "-c", code, "train", "--workload", "synthetic-cnn", "--nproc-per-node", "2",
                          "--strategy", "fsdp", "--cp", "1", "--dry-run"], timeout=60)[0]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("DYNAMO False"), result.stdout


def test_durations_one_rule():
    assert [parse_duration(t) for t in ("90", "2.5", "90s", "10m", "1h", "1.5min")] == [90, 2.5, 90, 600, 3600, 90]
    for bad in ("0", "-5", "2d", "soon", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    for given, shown in (("90", "90s"), ("10m", "10m"), ("2h", "2h")):
        result = scaletrain("launch", "--timeout", given, "--nproc-per-node", "2", "--dry-run", str(EXAMPLE))
        assert result.returncode == 0, result.stderr
        assert f"does not join within {shown} is named" in result.stdout


def test_dry_run_never_trains_inside_a_launched_job(tmp_path):
    out = tmp_path / "run"
    result = scaletrain("train", "--dry-run", "--out", str(out), env=test_env(**TORCHRUN_RANK))
    assert result.returncode == 0, result.stderr
    assert "dry run: rank 1 of 2 (started by torchrun) would train" in result.stdout and not out.exists()
    result = scaletrain("launch", "--nproc-per-node", "2", "--dry-run", str(EXAMPLE), env=test_env(**TORCHRUN_RANK))
    assert result.returncode == 0, result.stderr
    assert "launcher: spawn" in result.stdout and "argv " in result.stdout


@pytest.mark.parametrize("launcher, given, expected", [
    ("torchrun", "--max-restarts 0 --monitor-interval 1", "--max-restarts 0 --monitor-interval 1 -m scaletrain"),
    ("mpirun", "--bind-to none", "--bind-to none " + sys.executable),
    ("srun", "--exclusive", "--kill-on-bad-exit=1 --exclusive " + sys.executable),
])
def test_launcher_args_are_passed_through_and_shown(launcher, given, expected):
    result = scaletrain("launch", "--launcher", launcher, "--nproc-per-node", "2", "--launcher-args", given,
                        "--dry-run", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout, result.stdout


def test_sbatch_resources_are_written_and_shown(tmp_path):
    flags = ["--gpus-per-node", "2", "--cpus-per-task", "4", "--time", "90m", "--partition", "short"]
    shown = scaletrain("launch", "--launcher", "srun", "--nnodes", "2", "--nproc-per-node", "2", *flags,
                       "--dry-run", str(EXAMPLE))
    assert shown.returncode == 0, shown.stderr
    path = tmp_path / "job.sh"
    written = scaletrain("launch", "--launcher", "srun", "--nnodes", "2", "--nproc-per-node", "2", *flags,
                         "--sbatch", str(path), str(EXAMPLE))
    assert written.returncode == 0, written.stderr
    text = path.read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --gpus-per-node=2",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --time=01:30:00", "#SBATCH --partition=short"):
        assert line in text and line in shown.stdout, (line, text)
    assert "srun --nodes 2 --ntasks-per-node 2 --ntasks 4 --cpus-per-task=4" in text


def test_sbatch_asks_for_gpus_for_a_cuda_job_and_takes_tasks_from_the_allocation():
    """Written on a host without GPUs for nodes with them: one GPU per task by default, and
    the tasks per node are the allocation's (this host's cores say nothing about the nodes)."""
    result = scaletrain("train", "--device", "cuda", "--launcher", "srun", "--nnodes", "2", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --gpus-per-task=1" in result.stdout and "#SBATCH --ntasks-per-node" not in result.stdout
    assert "× the allocation's tasks per node" in result.stdout
    result = scaletrain("launch", "--launcher", "srun", "--nnodes", "2", "--dry-run", str(EXAMPLE))
    assert "--gpus" not in result.stdout and "#SBATCH --ntasks-per-node" not in result.stdout, result.stdout


def test_launch_max_restarts_starts_a_failed_job_again(tmp_path):
    marker = tmp_path / "failed-once"
    result, left = run_session(launch_argv("--nproc-per-node", "2", "--max-restarts", "1",
                                           str(SCRIPTS / "fail_once.py"), str(marker)), timeout=150)
    assert result.returncode == 0, result.stderr
    assert not left
    assert "rank 1 on host" in result.stderr and "RuntimeError: the first attempt fails" in result.stderr
    assert "restart 1 of 1" in result.stderr
    assert result.stdout.count("attempt 2 done: 3.0") == 2, result.stdout


def test_the_library_takes_seconds_too():
    """`scaletrain.init(timeout=20)`: a number of seconds, as every duration flag."""
    code = ("import scaletrain\nrun = scaletrain.init(timeout=20)\n"
            "print('WORLD', run.world_size)\nrun.close()" )
    result = run_session([sys.executable, "-c", code], timeout=90)[0]
    assert result.returncode == 0, result.stderr
    assert "WORLD 1" in result.stdout
