"""Detection from environment dictionaries: every launcher, and the traps."""

import pytest

from scaletrain.process.environment import detect
from scaletrain.process.slurm_hostlist import expand_hostlist, parse_tasks_per_node
from scaletrain.foundation.errors import DetectionError


def test_nothing_set_is_one_process():
    env = detect({})
    assert (env.rank, env.world_size, env.local_world_size, env.nnodes, env.launcher) == (0, 1, 1, 1, "none")
    assert not env.launched and not env.distributed


TORCHRUN = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
            "TORCHELASTIC_RUN_ID": "job1"}


def test_torchrun():
    env = detect(TORCHRUN)
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (5, 1, 8, 4)
    assert (env.node_rank, env.nnodes, env.master_addr, env.master_port) == (1, 2, "10.0.0.1", 29400)
    assert env.launcher == "torchrun"
    assert env.source("rank") == "RANK" and env.source("node_rank") == "GROUP_RANK"
    assert "rank 5 of 8 (rank from RANK" in env.explain()[1]


def test_torchrun_inside_slurm_wins_and_says_so():
    slurm = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "0",
             "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "n[1-2]"}
    env = detect({**slurm, **TORCHRUN})
    assert env.launcher == "torchrun" and env.rank == 5 and env.world_size == 8
    assert any("Slurm" in note for note in env.notes)


def test_env_convention_without_torchrun_needs_master_addr():
    with pytest.raises(DetectionError, match="MASTER_ADDR"):
        detect({"RANK": "0", "WORLD_SIZE": "2"})
    env = detect({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1234",
                  "SCALETRAIN_LAUNCHER": "spawn"})
    assert env.launcher == "spawn" and env.local_rank == 1 and env.local_world_size == 2


OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "host-a", "MASTER_PORT": "29600"}


def test_open_mpi():
    env = detect(OMPI)
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (3, 1, 4, 2)
    assert (env.node_rank, env.nnodes, env.launcher) == (1, 2, "mpirun")
    assert env.source("rank") == "OMPI_COMM_WORLD_RANK"


def test_mpirun_multi_node_without_master_addr_names_the_fix():
    env = {k: v for k, v in OMPI.items() if not k.startswith("MASTER")}
    with pytest.raises(DetectionError, match="-x MASTER_ADDR"):
        detect(env)


def test_mpirun_one_node_without_master_addr_uses_localhost():
    env = detect({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                  "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    assert env.master_addr == "127.0.0.1" and env.nnodes == 1


def test_mpirun_inside_slurm_allocation_is_mpirun():
    env = detect({**OMPI, "SLURM_JOB_ID": "7", "SLURM_NTASKS": "16", "SLURM_PROCID": "0"})
    assert env.launcher == "mpirun" and env.world_size == 4


def test_other_mpi_pmi():
    env = detect({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2",
                  "MASTER_ADDR": "m"})
    assert (env.rank, env.world_size, env.local_rank, env.node_rank, env.launcher) == (2, 4, 0, 1, "mpi")


SLURM = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NNODES": "2",
         "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_ID": "0",
         "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "12345"}


def test_slurm_task():
    env = detect(SLURM)
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (3, 1, 4, 2)
    assert (env.node_rank, env.nnodes, env.launcher) == (1, 2, "slurm")
    assert env.master_addr == "gpu07" and env.source("master_addr") == "first host of SLURM_JOB_NODELIST"
    assert env.master_port == 10000 + 12345 % 20000


def test_slurm_tasks_not_matching_tasks_per_node():
    with pytest.raises(DetectionError, match=r"SLURM_NTASKS=3 .* = 4; ask for --ntasks=4"):
        detect({**SLURM, "SLURM_NTASKS": "3", "SLURM_PROCID": "0"})


def test_slurm_compressed_tasks_per_node():
    env = {k: v for k, v in SLURM.items() if k != "SLURM_NTASKS_PER_NODE"}
    env.update(SLURM_TASKS_PER_NODE="2(x2)")
    assert detect(env).local_world_size == 2
    with pytest.raises(DetectionError, match="adds up to 3"):
        detect({**env, "SLURM_TASKS_PER_NODE": "2,1"})


def test_slurm_batch_script_without_srun_is_not_a_rank():
    env = detect({"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NNODES": "2"})
    assert env.launcher == "none" and env.world_size == 1
    assert any("srun" in note for note in env.notes)


@pytest.mark.parametrize("environ, message", [
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, "not below world size"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "a"}, "exceeds world size"),
    ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "a"},
     "local rank 2"),
    ({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, "RANK='x' is not a whole number"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, "not a TCP port"),
    ({**OMPI, "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, "exceeds world size"),
])
def test_contradicting_sizes(environ, message):
    with pytest.raises(DetectionError, match=message):
        detect(environ)


def test_hostlist_and_tasks_parsing():
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist("a-[8-10]-b") == ["a-8-b", "a-9-b", "a-10-b"]
    assert parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_detected_value_is_frozen():
    env = detect({})
    with pytest.raises(Exception):
        env.rank = 3
