"""A real one-node Slurm (testbed/slurm.sh: munge, slurmctld, slurmd), started here and
stopped after: `scaletrain launch --launcher srun` inside an allocation, and detection for
srun per task and for srun starting torchrun per node. Needs root (as in CI)."""

import json
import os
import subprocess
import sys

import pytest

from .helpers import REPO
from .launch_helpers import run_session

SLURM = str(REPO / "testbed" / "slurm.sh")
REPORT = str(REPO / "tests" / "scripts" / "report_rank.py")


@pytest.fixture(scope="module")
def slurm():
    assert os.geteuid() == 0, "the Slurm tests need root (munge, slurmd); CI runs them as root"
    started = subprocess.run([SLURM, "start"], capture_output=True, text=True, timeout=90)
    assert started.returncode == 0, started.stdout + started.stderr
    yield
    subprocess.run([SLURM, "stop"], capture_output=True, timeout=90)


def detected(stdout: str) -> list[dict]:
    facts = [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("DETECTED ")]
    return sorted(facts, key=lambda f: f["rank"])


def test_launch_with_srun_inside_an_allocation(slurm):
    result, left = run_session(["salloc", "-N1", "-n2", sys.executable, "-m", "scaletrain", "launch",
                                "--nproc-per-node", "2", REPORT], timeout=120)
    assert result.returncode == 0, result.stderr
    assert not left
    ranks = detected(result.stdout)
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert {r["launcher"] for r in ranks} == {"slurm"}  # auto picked srun inside the allocation
    assert {r["slurm_procid"] for r in ranks} == {"0", "1"} and {r["all_reduce"] for r in ranks} == {3.0}


def test_detection_of_srun_tasks(slurm):
    result, left = run_session(["salloc", "-n2", "srun", "-n2", sys.executable, REPORT, "--detect-only"], timeout=90)
    assert result.returncode == 0, result.stderr
    ranks = detected(result.stdout)
    assert [(r["rank"], r["world_size"], r["launcher"]) for r in ranks] == [(0, 2, "slurm"), (1, 2, "slurm")]
    assert ranks[1]["sources"]["rank"] == "SLURM_PROCID" and not left


def test_detection_of_torchrun_started_by_srun(slurm):
    result, left = run_session(["salloc", "-N1", "-n1", "srun", "-n1", sys.executable, "-m", "scaletrain", "launch",
                                "--launcher", "torchrun", "--nproc-per-node", "2", REPORT], timeout=120)
    assert result.returncode == 0, result.stderr
    ranks = detected(result.stdout)
    assert [(r["rank"], r["world_size"], r["launcher"]) for r in ranks] == [(0, 2, "torchrun"), (1, 2, "torchrun")]
    assert all(any("Slurm" in note for note in r["notes"]) for r in ranks)
    assert {r["all_reduce"] for r in ranks} == {3.0} and not left


def test_a_written_batch_script_with_resources_runs(slurm, tmp_path):
    """`--sbatch` with CPUs per task, a time limit and the partition, submitted as written:
    Slurm accepts every line and runs both ranks."""
    script = tmp_path / "job.sh"
    written = run_session([sys.executable, "-m", "scaletrain", "launch", "--launcher", "srun", "--nproc-per-node", "2",
                           "--cpus-per-task", "1", "--time", "5m", "--partition", "debug", "--sbatch", str(script),
                           REPORT], timeout=60)[0]
    assert written.returncode == 0, written.stderr
    text = script.read_text()
    assert "#SBATCH --cpus-per-task=1" in text and "#SBATCH --time=00:05:00" in text
    assert "#SBATCH --partition=debug" in text and "#SBATCH --ntasks-per-node=2" in text
    result, left = run_session(["sbatch", "--wait", str(script)], timeout=150, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not left
    (log,) = tmp_path.glob("scaletrain-*.out")
    ranks = detected(log.read_text())
    assert [r["rank"] for r in ranks] == [0, 1] and {r["all_reduce"] for r in ranks} == {3.0}, log.read_text()
    assert {r["launcher"] for r in ranks} == {"slurm"}


def test_a_script_without_a_main_guard_reads_a_stream_with_workers_under_srun(slurm):
    from .test_launch_main_guard import SCRIPT, every_sample_once

    result, left = run_session(["salloc", "-N1", "-n2", sys.executable, "-m", "scaletrain", "launch",
                                "--nproc-per-node", "2", str(SCRIPT)], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert every_sample_once(result.stdout), result.stdout
    assert not left
