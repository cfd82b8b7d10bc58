"""Kubernetes: the example PyTorchJob in docs/kubernetes/, checked through the environment the
Kubeflow training operator gives each of its pods (no cluster): detection sees node RANK of
WORLD_SIZE with one process per pod and the pod's CPU limit (a real cgroup quota here), the
manifest's command plans the pod's ranks, and two "pods" on this machine really run."""

from __future__ import annotations

import json
import os
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from .helpers import REPO, free_port, scaletrain, test_env
from .launch_helpers import finish_marked, run_session, start_marked

MANIFEST = REPO / "docs" / "kubernetes" / "pytorchjob.yaml"
REPORT = str(REPO / "tests" / "scripts" / "report_rank.py")


def pod_environments(manifest: dict) -> list[dict]:
    """The variables the training operator sets in each pod, in rank order: MASTER_ADDR is
    the master's service, MASTER_PORT the container port named pytorchjob-port, WORLD_SIZE
    the number of pods, RANK 0 for the master and 1.. for the workers."""
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    master = specs["Master"]["template"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in master["ports"] if p["name"] == "pytorchjob-port")
    world = sum(spec["replicas"] for spec in specs.values())
    common = {"MASTER_ADDR": f"{manifest['metadata']['name']}-master-0", "MASTER_PORT": str(port),
              "WORLD_SIZE": str(world), "PYTHONUNBUFFERED": "0", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    return [{**common, "RANK": str(rank)} for rank in range(world)]


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


@contextmanager
def cpu_quota(cores: float):
    """A real cgroup with a CPU quota of `cores` (v1 `cpu` controller or v2 `cpu.max`);
    yields a shell prefix that moves a command into it."""
    name = f"scaletrain-test-{uuid.uuid4().hex[:8]}"
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    if (v1 / "cpu.cfs_quota_us").exists():
        folder = v1 / name
        folder.mkdir()
        (folder / "cpu.cfs_quota_us").write_text(str(int(cores * 100000)))
    elif "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
        folder = v2 / name
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{int(cores * 100000)} 100000")
    else:
        pytest.skip("no cgroup cpu controller can be written here (the test needs root on a cgroup v1 or v2 host)")
    try:
        yield f"echo $$ > {folder}/cgroup.procs && exec"
    finally:
        folder.rmdir()


def test_a_pod_is_one_node_and_sizes_threads_to_its_cpu_limit(manifest):
    pods = pod_environments(manifest)
    assert len(pods) == 4
    with cpu_quota(1.0) as enter:
        result = run_session(["sh", "-c", f'{enter} "$0" -m scaletrain env --json', sys.executable],
                             timeout=60, env=test_env(**pods[1]))[0]
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    env = facts["environment"]
    assert env["launcher"] == "kubernetes" and env["per_node"]
    assert (env["node_rank"], env["nnodes"], env["local_rank"], env["local_world_size"]) == (1, 4, 0, 1)
    # The pod may use one core (its quota), although it sees the machine's cores.
    assert facts["devices"]["cpu_cores"] == 1 == facts["threads_per_process"]
    assert len(os.sched_getaffinity(0)) >= 2


def test_the_manifests_command_plans_the_pods_ranks(manifest):
    pod = pod_environments(manifest)[1]
    pod["MASTER_ADDR"] = "127.0.0.1"  # in the cluster, the master's service resolves to its pod
    command = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[:4] == ["scaletrain", "train", "--nproc-per-node", "2"]
    result = scaletrain(*command[1:], "--dry-run", env=test_env(**pod), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "4 node(s) × 2 process(es) = 8 rank(s)" in result.stdout
    assert "this node: node 1, ranks 2–3 of 8" in result.stdout
    assert "--nnodes 4 --nproc-per-node 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 23456" in result.stdout
    # `scaletrain launch` in the same pod plans the same ranks for a user's script.
    result = scaletrain("launch", "--nproc-per-node", "2", "--dry-run", REPORT, env=test_env(**pod), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "this node: node 1, ranks 2–3 of 8" in result.stdout and "--node-rank 1" in result.stdout


def test_two_pods_start_their_ranks_with_the_right_global_ranks(tmp_path):
    """Two processes standing for two pods (one process per pod, as the operator starts
    them), each running `scaletrain launch --nproc-per-node 2`: 4 ranks that talk."""
    port = str(free_port())
    procs = []
    for rank in range(2):
        pod = test_env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                       KUBERNETES_SERVICE_HOST="10.96.0.1")
        procs.append(start_marked([sys.executable, "-m", "scaletrain", "launch", "--nproc-per-node", "2", REPORT],
                                  env=pod))
    results = [finish_marked(proc, token, timeout=150) for proc, token in procs]
    for result, left in results:
        assert result.returncode == 0, result.stderr
        assert not left
    ranks = {}
    for pod, (result, _left) in enumerate(results):
        for line in result.stdout.splitlines():
            if line.startswith("DETECTED "):
                facts = json.loads(line.split(" ", 1)[1])
                ranks[facts["rank"]] = (pod, facts["local_rank"], facts["world_size"], facts["all_reduce"])
    assert ranks == {0: (0, 0, 4, 10.0), 1: (0, 1, 4, 10.0), 2: (1, 0, 4, 10.0), 3: (1, 1, 4, 10.0)}
