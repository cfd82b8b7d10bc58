"""Two hosts on one machine (testbed/netns.sh: namespaces st-node0 10.77.0.1 and st-node1
10.77.0.2 joined by veth): `scaletrain train` across them with torchrun (static and c10d
rendezvous) and with Open MPI, nothing told which interface to use. Needs root (as in CI)."""

import json
import os
import subprocess

import pytest

from .helpers import REPO, free_port
from .helpers import test_env as child_env
from .launch_helpers import EXAMPLE, FAIL_SCRIPT, finish_marked, first_user_exception, run_session, start_marked

NETNS = str(REPO / "testbed" / "netns.sh")
AGENT = str(REPO / "testbed" / "mpi-ssh-agent")
TRAIN = ["train", "--workload", "digits-mlp", "--epochs", "1", "--batch-size", "64"]


def on(node: int, *argv: str) -> list[str]:
    return [NETNS, "exec", str(node), *argv]


def scaletrain_on(node: int, *args: str) -> list[str]:
    import sys

    return on(node, sys.executable, "-m", "scaletrain", *args)


def namespace_pids() -> list[str]:
    return [p for ns in ("st-node0", "st-node1")
            for p in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()]


@pytest.fixture(scope="module")
def hosts():
    assert os.geteuid() == 0, "the two-host tests need root (network namespaces); CI runs them as root"
    subprocess.run([NETNS, "up"], check=True, capture_output=True, timeout=60)
    yield
    subprocess.run([NETNS, "down"], capture_output=True, timeout=60)


@pytest.fixture
def clean_hosts(hosts):
    yield
    assert not namespace_pids(), f"processes left in the namespaces: {namespace_pids()}"


def two_nodes(node0: list[str], node1: list[str], timeout: float = 200, env=None):
    first, token0 = start_marked(node0, env=env)
    second, token1 = start_marked(node1, env=env)
    r1, left1 = finish_marked(second, token1, timeout)
    r0, left0 = finish_marked(first, token0, timeout)
    assert not left0 and not left1, f"left behind: {left0 + left1}"
    for r in (r0, r1):
        assert r.returncode == 0, f"{r.args}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r0, r1


def assert_two_node_summary(out, launcher):
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["nnodes"], summary["world_size"], summary["launcher"]) == (2, 2, launcher)


def test_torchrun_static_rendezvous(clean_hosts, tmp_path):
    port = str(free_port())
    common = [*TRAIN, "--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "1",
              "--master-addr", "10.77.0.1", "--master-port", port, "--out", str(tmp_path / "run")]
    two_nodes(scaletrain_on(0, *common, "--node-rank", "0"), scaletrain_on(1, *common, "--node-rank", "1"))
    assert_two_node_summary(tmp_path / "run", "torchrun")


def test_torchrun_c10d_rendezvous(clean_hosts, tmp_path):
    common = [*TRAIN, "--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "1",
              "--rdzv-endpoint", f"10.77.0.1:{free_port()}", "--out", str(tmp_path / "run")]
    two_nodes(scaletrain_on(0, *common), scaletrain_on(1, *common))
    assert_two_node_summary(tmp_path / "run", "torchrun")


def mpi_env():
    return child_env(OMPI_MCA_plm_rsh_agent=AGENT)  # Open MPI's "ssh" into the other namespace


def test_mpirun_across_two_hosts_with_the_strategy_chosen_there(clean_hosts, tmp_path):
    """`train --strategy auto --hosts`: the choice is measured across the hosts (the network
    between them, DDP and FSDP steps across them), then trained there by mpirun."""
    env = {**mpi_env(), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result, left = run_session(scaletrain_on(0, "train", "--strategy", "auto", "--workload", "digits-mlp",
                                             "--batch-size", "64", "--max-steps", "10", "--launcher", "mpirun",
                                             "--max-other-load", "64",
                                             "--hosts", "10.77.0.1:1,10.77.0.2:1", "--out", str(tmp_path / "run")),
                               timeout=400, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not left
    assert "scaletrain: Chosen: " in result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    if summary["world_size"] == 1:  # across hosts a choice is one process or every slot: one was predicted faster
        assert "One process: distributing is predicted to lose here" in summary["auto_choice"], summary["auto_choice"]
    else:
        assert_two_node_summary(tmp_path / "run", "mpirun")
    assert summary["strategy"] != "auto" and summary["auto_choice"].startswith("Chosen: ")
    (cached,) = (tmp_path / "cache" / "scaletrain" / "probes").glob("*.json")
    for probe in json.loads(cached.read_text())["probes"]:
        assert "one on each of 10.77.0.1, 10.77.0.2" in probe["network"]["source"]
        assert probe["network_ddp_step"]["world_size"] == 2 and probe["network_fsdp_step"]["step_s"] > 0


def test_mpirun_failure_on_the_other_host(clean_hosts):
    result, left = run_session(scaletrain_on(0, "launch", "--launcher", "mpirun", "--hosts", "10.77.0.1:1,10.77.0.2:1",
                                             str(FAIL_SCRIPT), "1"), timeout=150, env=mpi_env())
    assert result.returncode != 0 and not left
    assert first_user_exception(result.stderr, FAIL_SCRIPT.name) == "ValueError: boom on rank 1", result.stderr
    assert "scaletrain: rank 1 on host" in result.stderr and "failed first" in result.stderr


@pytest.mark.parametrize("address, expected", [
    ("10.77.0.9", "no answer from the master 10.77.0.9"),        # right subnet, nobody there
    ("198.51.100.7", "no network route from this host"),         # no route at all
])
def test_unreachable_master(clean_hosts, address, expected):
    result, left = run_session(scaletrain_on(1, "launch", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                                             address, str(EXAMPLE)), timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and expected in lines[0], result.stderr
    assert "--master-addr" in lines[0] and not left


def test_env_reports_the_interface(clean_hosts):
    result, _ = run_session(scaletrain_on(1, "env", "--json"), timeout=60,
                            env=child_env(RANK="1", WORLD_SIZE="2", MASTER_ADDR="10.77.0.1", MASTER_PORT="29500"))
    network = json.loads(result.stdout)["network"]
    assert network["interface"] == "stnet0" and network["local_addr"] == "10.77.0.2"
    assert network["set"] == {"GLOO_SOCKET_IFNAME": "stnet0", "NCCL_SOCKET_IFNAME": "stnet0"}
    assert any("reached via stnet0" in reason for reason in network["reasons"])


def test_bench_and_plan_across_two_hosts(clean_hosts, tmp_path):
    """bench measures ddp ×2 with a process on each host (mpirun), the reference here; plan
    measures the all-reduce between the hosts and predicts from it."""
    hosts = ["--hosts", "10.77.0.1:1,10.77.0.2:1"]
    # The test bed's hosts share this machine's cores: the other host's rank is "another
    # process" to the load meter here (two real machines would not see each other's).
    short = ["--workload", "digits-mlp", "--steps", "3", "--warmup", "1", "--min-seconds", "0.2",
             "--max-other-load", "64"]
    bench, left = run_session(scaletrain_on(0, "bench", *short, *hosts, "--rounds", "1", "--no-predict",
                                            "--out", str(tmp_path / "bench")), timeout=240, env=mpi_env())
    assert bench.returncode == 0 and not left, bench.stdout + bench.stderr
    assert "across 10.77.0.1, 10.77.0.2: 1 process(es) on each" in bench.stdout
    configs = {c["label"]: c for c in json.loads((tmp_path / "bench" / "bench.json").read_text())["configurations"]}
    assert configs["ddp ×2"]["world_size"] == 2 and configs["ddp ×2"]["samples_per_s"]["median"] > 0
    plan, left = run_session(scaletrain_on(0, "plan", *short, *hosts, "--strategy", "ddp,pipeline",
                                           "--probe-rounds", "1", "--json"), timeout=240, env=mpi_env())
    assert plan.returncode == 0 and not left, plan.stderr
    doc = json.loads(plan.stdout)
    network = doc["probe"]["network"]
    assert "one on each of 10.77.0.1, 10.77.0.2" in network["source"] and network["busbw"] > 0
    # DDP steps across the hosts, with and without their all-reduce: what ddp across them takes
    hosts_ddp = doc["probe"]["network_ddp_step"]
    assert hosts_ddp["world_size"] == 2 and hosts_ddp["step_s"] > 0 and hosts_ddp["local_step_s"] > 0
    across = [p for p in doc["predictions"] if p["world_size"] == 2]
    assert {p["strategy"] for p in across} == {"ddp", "pipeline"} and all(p["nodes"] == 2 for p in across)
