"""A rank looks to the user's program like a process torchrun started, under every
launcher: a script without `if __name__ == "__main__":` that reads a stream with DataLoader
workers reads every sample exactly once (srun: tests/test_launch_slurm.py)."""

import json

import pytest

from .helpers import REPO
from .launch_helpers import launch_argv, run_session

SCRIPT = REPO / "tests" / "scripts" / "stream_without_main_guard.py"


def every_sample_once(stdout: str) -> bool:
    seen = [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("SEEN ")]
    return len(seen) == 1 and seen[0] == list(range(96))


@pytest.mark.parametrize("launcher", ["spawn", "torchrun", "mpirun"])
def test_a_script_without_a_main_guard_reads_a_stream_with_workers(launcher):
    result, left = run_session(launch_argv("--launcher", launcher, "--nproc-per-node", "2", str(SCRIPT)), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert every_sample_once(result.stdout), result.stdout
    assert "Traceback" not in result.stderr and not left
