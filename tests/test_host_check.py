"""A host of --hosts that cannot run ranks is found before mpirun starts, and said in one line
naming the host and what failed: refused, unknown, a login refused in batch mode, the Python
or scaletrain missing there. Loopback addresses other than 127.0.0.1 stand for other hosts
(mpirun reaches them through its agent); no ssh server is needed."""

from __future__ import annotations

import os
import sys

import pytest

from scaletrain.foundation.errors import UsageError
from scaletrain.launchers import host_check
from tests.helpers import REPO, scaletrain, test_env

AGENT = str(REPO / "testbed" / "mpi-ssh-agent")


def _agent(tmp_path, body: str) -> list[str]:
    """An agent as Open MPI calls one (`AGENT [options] HOST command`), running `body`."""
    path = tmp_path / "agent"
    path.write_text(f"#!/bin/sh\nshift\n{body}\n")
    path.chmod(0o755)
    return [str(path)]


def test_each_failure_is_named(tmp_path):
    # ssh's port: nothing listens at 127.0.0.9:22 (no ssh server needed); a name that does not resolve.
    assert host_check.problem("127.0.0.9", sys.executable, None).startswith("refused")
    assert host_check.problem("nosuch.invalid", sys.executable, None).startswith("unknown host")
    # The agent's own refusals, as ssh words them.
    refused = _agent(tmp_path, 'echo "root@127.0.0.9: Permission denied (publickey)." >&2; exit 255')
    assert "no key" in host_check.problem("127.0.0.9", sys.executable, refused)
    # The Python there lacks scaletrain (run without its site-packages, outside the repository).
    bare = tmp_path / "python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    there = _agent(tmp_path, f'cd {tmp_path} && exec sh -c "$*"')
    assert host_check.problem("127.0.0.9", str(bare), there).startswith("scaletrain is not installed there")
    assert host_check.problem("127.0.0.9", "/nonexistent/python3", there).startswith("/nonexistent/python3 is not there")
    assert host_check.problem("127.0.0.9", sys.executable, there) is None  # a host that can: nothing to say
    # This host's own addresses are mpirun's to start, not checked.
    assert host_check.runs_here("127.0.0.1") and host_check.runs_here("localhost")
    assert not host_check.runs_here("127.0.0.9")
    with pytest.raises(UsageError, match=r"--hosts: host 127\.0\.0\.9 cannot run ranks: refused"):
        host_check.check_hosts(["127.0.0.1", "127.0.0.9"], sys.executable, {})


def test_launch_and_train_check_the_hosts_before_mpirun(tmp_path):
    """The launcher's preflight, with Open MPI's agent as the test bed gives it (it knows no 127.0.0.9)."""
    script = tmp_path / "script.py"
    script.write_text("print('ran')\n")
    env = test_env(OMPI_MCA_plm_rsh_agent=AGENT)
    done = scaletrain("launch", "--launcher", "mpirun", "--hosts", "127.0.0.1:1,127.0.0.9:1", str(script),
                      env=env, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "ran" not in done.stdout, done.stderr
    assert lines[0].startswith("scaletrain: error: --hosts: host 127.0.0.9 cannot run ranks: mpi-ssh-agent") \
        and "unknown host '127.0.0.9'" in lines[0], lines
    env.pop("OMPI_MCA_plm_rsh_agent")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.1 slots=1\n127.0.0.9 slots=1\n")
    done = scaletrain("train", "--launcher", "mpirun", "--hostfile", str(hostfile), "--workload", "digits-mlp",
                      "--out", str(tmp_path / "run"), env=env, timeout=60)
    assert done.returncode == 2 and not (tmp_path / "run").exists(), done.stderr
    assert done.stderr.strip().splitlines() == [f"scaletrain: error: --hostfile {hostfile}: host 127.0.0.9 cannot run "
                                                f"ranks: refused: nothing answers on ssh's port 22; fix it or leave it "
                                                f"out of --hostfile {hostfile}"]
    assert os.environ.get("OMPI_MCA_plm_rsh_agent") is None  # (the test's own environment untouched)
