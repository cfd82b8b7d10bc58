"""Two hosts (network namespaces joined by a veth pair, see testbed/netns.sh): the link goes
down mid-run; each side exits non-zero within the timeout + 15 s, naming the other."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time

import pytest

from scaletrain.checkpoint import latest_checkpoint
from tests.faults import Background, wait_for
from tests import helpers
from tests.helpers import REPO, free_port

NETNS = REPO / "testbed" / "netns.sh"
LOCK = "/tmp/scaletrain-testbed.lock"  # the namespaces are machine-wide: one test bed user at a time
TIMEOUT_S = 10

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not NETNS.exists(),
                                reason="needs root, iproute2 and testbed/netns.sh")


def netns(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(NETNS), *args], capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture
def two_hosts():
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if netns("status", check=False).returncode != 0:
            netns("up")
        netns("link-up")
        try:
            yield
        finally:
            netns("link-up", check=False)


def rank(node: int, port: int, out, *args: str) -> Background:
    env = helpers.test_env(RANK=str(node), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK=str(node),
                   GROUP_WORLD_SIZE="2", MASTER_ADDR="10.77.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="stnet0")
    return Background([str(NETNS), "exec", str(node), sys.executable, "-m", "scaletrain", "train", "--strategy", "ddp",
                       "--workload", "digits-mlp", "--epochs", "50", "--batch-size", "8", "--checkpoint-every", "5",
                       "--timeout", f"{TIMEOUT_S}s", "--out", str(out), *args], env=env)


def test_link_down_names_the_unreachable_rank(tmp_path, two_hosts):
    port = free_port()
    with rank(0, port, tmp_path / "node0") as node0, rank(1, port, tmp_path / "node1") as node1:
        wait_for(lambda: latest_checkpoint(tmp_path / "node0" / "checkpoints"), 150, "training to be under way",
                 node0.proc)
        netns("link-down")
        cut_at = time.monotonic()
        results = {}
        for name, job in (("node0", node0), ("node1", node1)):
            status, out, err = job.finish(timeout=TIMEOUT_S + 60)
            results[name] = (status, time.monotonic() - cut_at, err)
    for name, (status, took, err) in results.items():
        assert status != 0, f"{name} exited 0\n{err}"
        assert took <= TIMEOUT_S + 15, f"{name} took {took:.1f} s\n{err}"
    errors0 = [line for line in results["node0"][2].splitlines() if line.startswith("scaletrain: error:")]
    errors1 = [line for line in results["node1"][2].splitlines() if line.startswith("scaletrain: error:")]
    print(*errors0, *errors1, sep="\n")
    assert len(errors0) == 1 and "rank 1 stopped responding (pid" in errors0[0], results["node0"][2]
    assert len(errors1) == 1 and "rank 0 stopped responding or the network to it is cut" in errors1[0], \
        results["node1"][2]
