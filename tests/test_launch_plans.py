"""Plans are pure: the exact argv and environment of every launcher, and the choices made
before building them (auto launcher, hostfiles, network interface)."""

import shlex
from dataclasses import replace

import pytest

from scaletrain.process import netif
from scaletrain.cli.launch_options import strip_launch_args
from scaletrain.foundation.errors import UsageError
from scaletrain.launchers.launch_plan import Target
from scaletrain.launchers.registry import LAUNCHERS, pick_launcher
from scaletrain.launchers.request import LaunchRequest, parse_hostfile, parse_hosts

from .helpers import REPO, scaletrain

PY = "/usr/bin/python3"
RUNNER = [PY, "-m", "scaletrain.launchers.rank", "--join-timeout", "600"]
TARGET = Target(script="train.py", args=("--lr", "0.1"))
ETH = netif.Interface("eth1", "10.0.0.2", 24)


def request(**kw) -> LaunchRequest:
    base = dict(target=TARGET, python=PY, is_root=False, cpu_cores=8, environ={}, cwd="/work")
    base.update(kw)
    return LaunchRequest(**base)


def build_plan(req: LaunchRequest, network=None):
    return LAUNCHERS[req.launcher].plan(req, network)


def resolve(req: LaunchRequest) -> LaunchRequest:
    return LAUNCHERS[pick_launcher(req)].resolve(req)


def remote_master(addr="10.0.0.1") -> netif.Choice:
    return netif.choose(addr, {}, interfaces=[ETH], route=lambda ip: "10.0.0.2", resolver=lambda h: h)


def test_spawn_plan_gives_each_rank_torchrun_variables():
    plan = build_plan(request(launcher="spawn", nproc_per_node=2, nnodes=1, master_addr="127.0.0.1",
                              master_port=29555))
    assert [c.argv for c in plan.commands] == [tuple(RUNNER + ["train.py", "--lr", "0.1"])] * 2
    assert plan.commands[1].env == {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555", "SCALETRAIN_LAUNCHER": "spawn",
        "OMP_NUM_THREADS": "4"}  # 8 cores shared by 2 ranks


def test_torchrun_static_plan():
    plan = build_plan(request(launcher="torchrun", nproc_per_node=2, nnodes=2, node_rank=1,
                              master_addr="10.0.0.1", master_port=29500), remote_master())
    (command,) = plan.commands
    assert list(command.argv) == [PY, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
                                  "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29500",
                                  *RUNNER[1:], "train.py", "--lr", "0.1"]
    assert command.env == {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1"}


def test_torchrun_one_node_is_standalone():
    req = resolve(request(launcher="torchrun", nproc_per_node=2))
    assert list(build_plan(req).commands[0].argv) == [
        PY, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2", "--standalone",
        *RUNNER[1:], "train.py", "--lr", "0.1"]


def test_torchrun_c10d_plan_names_local_address_and_host():
    host_side = netif.choose("10.0.0.2", {}, interfaces=[ETH], route=lambda ip: ip, resolver=lambda h: h)
    plan = build_plan(request(launcher="torchrun", nproc_per_node=1, nnodes=2, rdzv_endpoint="10.0.0.2:29400"),
                      host_side)
    assert list(plan.commands[0].argv) == [
        PY, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "10.0.0.2:29400", "--rdzv-id", "scaletrain", "--rdzv-conf", "is_host=1",
        "--local-addr", "10.0.0.2", *RUNNER[1:], "train.py", "--lr", "0.1"]
    other_side = build_plan(request(launcher="torchrun", nproc_per_node=1, nnodes=2,
                                    rdzv_endpoint="10.0.0.1:29400"), remote_master())
    assert "is_host=1" not in other_side.commands[0].argv
    assert other_side.commands[0].argv[other_side.commands[0].argv.index("--local-addr") + 1] == "10.0.0.2"


def test_mpirun_plan_across_hosts_as_root_with_oversubscription():
    req = request(launcher="mpirun", nproc_per_node=4, nnodes=2, hosts=(("a", 4), ("b", 4)), master_addr="a",
                  master_port=29500, is_root=True, cpu_cores=2, environ={"PYTHONPATH": "/src"})
    (command,) = build_plan(req, remote_master()).commands
    assert list(command.argv) == [
        "mpirun", "-np", "8", "--host", "a:4,b:4", "--allow-run-as-root", "--oversubscribe",
        "--bind-to", "none", "--mca", "oob_tcp_if_include", "10.0.0.0/24", "--mca", "btl_tcp_if_include", "10.0.0.0/24",
        "-x", "MASTER_ADDR=a", "-x", "MASTER_PORT=29500", "-x", "SCALETRAIN_ERROR_DIR", "-x", "SCALETRAIN_LAUNCHER_PROCESS", "-x", "SCALETRAIN_STDOUT_IS_TERMINAL", "-x", "PYTHONPATH",
        *RUNNER, "train.py", "--lr", "0.1"]


def test_mpirun_plan_one_host_not_root():
    req = request(launcher="mpirun", nproc_per_node=2, nnodes=1, master_addr="127.0.0.1", master_port=40000,
                  environ={"GLOO_SOCKET_IFNAME": "eth7", "OMPI_MCA_oob_tcp_if_include": "eth7"})
    (command,) = build_plan(req).commands
    assert list(command.argv) == ["mpirun", "-np", "2", "--bind-to", "none", "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=40000",
                                  "-x", "SCALETRAIN_ERROR_DIR", "-x", "SCALETRAIN_LAUNCHER_PROCESS", "-x", "SCALETRAIN_STDOUT_IS_TERMINAL", "-x", "GLOO_SOCKET_IFNAME", *RUNNER,
                                  "train.py", "--lr", "0.1"]


def test_srun_plan_inside_and_outside_an_allocation():
    inside = request(launcher="srun", nproc_per_node=2, nnodes=1, environ={"SLURM_JOB_ID": "7"})
    plan = build_plan(inside)
    assert list(plan.commands[0].argv) == ["srun", "--nodes", "1", "--ntasks-per-node", "2", "--ntasks", "2",
                                           "--kill-on-bad-exit=1", *RUNNER, "train.py", "--lr", "0.1"]
    assert plan.commands[0].runs_here and "batch script" not in plan.render()
    outside = build_plan(replace(inside, environ={}, nnodes=2, master_port=29999))
    assert not outside.commands[0].runs_here
    script = outside.batch_script
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=2" in script
    assert "export MASTER_PORT=29999" in script
    srun_line = next(line for line in script.splitlines() if line.startswith("srun "))
    assert shlex.split(srun_line) == list(outside.commands[0].argv)


def test_auto_launcher():
    assert pick_launcher(request()) == "spawn"
    assert pick_launcher(request(nnodes=2)) == "torchrun"
    assert pick_launcher(request(rdzv_endpoint="h:1")) == "torchrun"
    assert pick_launcher(request(hosts=(("a", 1),))) == "mpirun"
    assert pick_launcher(request(environ={"SLURM_JOB_ID": "3"})) == "srun"
    # inside a task (a step) it is not an allocation to launch into
    assert pick_launcher(request(environ={"SLURM_JOB_ID": "3", "SLURM_STEP_ID": "0"})) == "spawn"


def test_resolve_fills_and_refuses():
    req = resolve(request(launcher="mpirun", hosts=(("a", 2), ("b", 2)), master_port=1234))
    assert (req.nnodes, req.nproc_per_node, req.master_addr) == (2, 2, "a")
    with pytest.raises(UsageError, match="no slots"):
        resolve(request(launcher="mpirun", hosts=(("a", None), ("b", None)), hostfile="hosts"))
    with pytest.raises(UsageError, match="different slot counts"):
        resolve(request(launcher="mpirun", hosts=(("a", 1), ("b", 2)), hostfile="hosts"))
    with pytest.raises(UsageError, match="--master-addr"):
        resolve(request(launcher="torchrun", nnodes=2))
    with pytest.raises(UsageError, match="this machine only"):
        resolve(request(launcher="spawn", nnodes=2))
    with pytest.raises(UsageError, match="--node-rank 2"):
        resolve(request(launcher="torchrun", nnodes=2, node_rank=2, master_addr="h"))


def test_hostfile_and_hosts_parsing():
    assert parse_hostfile("# cluster\nnode1 slots=2\nnode2 slots=2 max_slots=4\n\nnode3\n") == \
        [("node1", 2), ("node2", 2), ("node3", None)]
    with pytest.raises(UsageError, match="slots=2"):
        parse_hostfile("node1 slots=two")
    assert parse_hosts("a:2,b") == [("a", 2), ("b", None)]


def test_network_choice():
    loop = netif.choose("127.0.0.1", {})
    assert loop.set_vars == {} and loop.local_addr is None
    remote = remote_master()
    assert remote.set_vars == {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1"}
    assert remote.local_addr == "10.0.0.2" and remote.subnet == "10.0.0.0/24" and not remote.master_is_here
    user = netif.choose("10.0.0.1", {"GLOO_SOCKET_IFNAME": "mine"}, interfaces=[ETH], route=lambda ip: "10.0.0.2",
                        resolver=lambda h: h)
    assert user.set_vars == {"NCCL_SOCKET_IFNAME": "eth1"} and any("set by you" in r for r in user.reasons)

    def no_route(ip):
        raise OSError(101, "Network is unreachable")

    with pytest.raises(UsageError, match="no network route"):
        netif.choose("10.9.9.9", {}, interfaces=[ETH], route=no_route, resolver=lambda h: h)


def test_strip_launch_args():
    argv = ["--epochs", "1", "--launcher", "mpirun", "--nproc-per-node=2", "--dry-run", "--hosts", "a:1",
            "--out", "x", "--seed", "3"]
    assert strip_launch_args(argv, also=("--out",)) == ["--epochs", "1", "--seed", "3"]


def test_dry_run_prints_the_exact_argv():
    result = scaletrain("launch", "--launcher", "mpirun", "--nproc-per-node", "2", "--master-port", "29123",
                        "--dry-run", "examples/plain_ddp.py", "--steps", "3", cwd=REPO, timeout=60, check=True)
    argv_line = next(line for line in result.stdout.splitlines() if line.strip().startswith("argv "))
    argv = shlex.split(argv_line.strip()[5:])
    assert argv[:3] == ["mpirun", "-np", "2"]
    assert argv[argv.index("-x") + 1:argv.index("-x") + 4] == ["MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=29123"]
    assert argv[-7:] == ["-m", "scaletrain.launchers.rank", "--join-timeout", "600", "examples/plain_ddp.py",
                         "--steps", "3"]
