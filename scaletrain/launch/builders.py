"""One plan builder per launcher: a resolved LaunchRequest (and the network choice) in, a
Plan out. Pure: no lookups, no processes, so the unit tests assert the exact argv."""

from __future__ import annotations

import shlex
from typing import Optional

from ..netif import IFNAME_VARS, Choice
from .plan import ERROR_DIR_VAR, RANK_RUNNER, Command, Plan
from .request import LaunchRequest, split_endpoint
from .spawn import spawn_environments


def _network_env(network: Optional[Choice]) -> dict:
    return dict(network.set_vars) if network else {}


def spawn_plan(req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
    """N ranks on this machine, children of this Python process (torch.multiprocessing)."""
    n = req.nproc_per_node
    commands = []
    for rank, env in enumerate(spawn_environments(n, req.master_port, req.master_addr)):
        env.update(_network_env(network))
        commands.append(Command(f"rank {rank} (a child process of this one)", tuple(req.target.rank_argv(req.python)), env))
    return Plan("spawn", tuple(commands), req.target, 1, n, in_process=True)


def torchrun_plan(req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
    """torch's elastic agent on this node; with several nodes, every node runs its own."""
    argv = [req.python, "-m", "torch.distributed.run", "--nnodes", str(req.nnodes),
            "--nproc-per-node", str(req.nproc_per_node)]
    notes = []
    if req.rdzv_endpoint:
        host, port = split_endpoint(req.rdzv_endpoint)
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", req.rdzv_id]
        if network and network.master_is_here:
            # torchrun guesses whether it hosts the rendezvous from the hostname, which
            # inside a container or namespace names loopback: say so explicitly.
            argv += ["--rdzv-conf", "is_host=1"]
        if network and network.local_addr:
            argv += ["--local-addr", network.local_addr]
        where = f"this node (the rendezvous at {host}:{port} numbers the nodes)"
        if req.nnodes > 1:
            notes.append(f"run the same command on each of the {req.nnodes} nodes")
    elif req.master_addr is None:
        argv.append("--standalone")  # one node: a local rendezvous on a port torchrun picks
        where = "this node"
    else:
        argv += ["--node-rank", str(req.node_rank), "--master-addr", req.master_addr,
                 "--master-port", str(req.master_port)]
        where = f"node {req.node_rank} (this one)"
        if req.nnodes > 1:
            others = ", ".join(str(r) for r in range(req.nnodes) if r != req.node_rank)
            notes.append(f"on node(s) {others} run the same command with --node-rank set to that node's number")
    argv += ["-m", RANK_RUNNER, *req.target.runner_args()]
    return Plan("torchrun", (Command(where, tuple(argv), _network_env(network)),), req.target,
                req.nnodes, req.nproc_per_node, tuple(notes))


def _mpirun_interface_args(req: LaunchRequest, network: Optional[Choice]) -> list[str]:
    """Keep Open MPI's own wiring on the subnet that reaches the master, unless told otherwise."""
    if req.nnodes < 2 or not network or not network.subnet:
        return []
    args = []
    for param in ("oob_tcp_if_include", "btl_tcp_if_include"):
        if not req.environ.get(f"OMPI_MCA_{param}"):
            args += ["--mca", param, network.subnet]
    return args


def mpirun_plan(req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
    """One mpirun on this node starts every rank on every host (through ssh or its agent)."""
    n = req.nproc_per_node
    argv = ["mpirun", "-np", str(n * req.nnodes)]
    if req.hosts:
        argv += ["--host", ",".join(f"{host}:{n}" for host, _slots in req.hosts)]
    if req.is_root:
        argv.append("--allow-run-as-root")  # Open MPI refuses root without it
    if n > req.cpu_cores:
        argv.append("--oversubscribe")  # more ranks than cores: Open MPI refuses without it
    argv += _mpirun_interface_args(req, network)
    argv += ["-x", f"MASTER_ADDR={req.master_addr}", "-x", f"MASTER_PORT={req.master_port}", "-x", ERROR_DIR_VAR]
    # Variables the ranks need from this shell; each host's interface is chosen on that host.
    for var in ("PYTHONPATH", *IFNAME_VARS):
        if req.environ.get(var):
            argv += ["-x", var]
    argv += req.target.rank_argv(req.python)
    hosts = ", ".join(h for h, _ in req.hosts) or "this host"
    return Plan("mpirun", (Command(f"this host (mpirun starts the ranks on {hosts})", tuple(argv)),),
                req.target, req.nnodes, n)


def srun_argv(req: LaunchRequest) -> list[str]:
    n, m = req.nproc_per_node, req.nnodes
    # --kill-on-bad-exit: one failing task ends the step instead of leaving the rest waiting.
    return ["srun", "--nodes", str(m), "--ntasks-per-node", str(n), "--ntasks", str(n * m),
            "--kill-on-bad-exit=1", *req.target.rank_argv(req.python)]


def batch_script(req: LaunchRequest) -> str:
    """A ready sbatch script that runs the same srun inside its allocation."""
    env_lines = [f"export {k}={shlex.quote(str(v))}" for k, v in _master_env(req).items()]
    return "\n".join([
        "#!/bin/bash",
        "# Written by `scaletrain launch --sbatch`; submit it with: sbatch <this file>",
        "#SBATCH --job-name=scaletrain",
        f"#SBATCH --nodes={req.nnodes}",
        f"#SBATCH --ntasks-per-node={req.nproc_per_node}",
        "#SBATCH --output=scaletrain-%j.out",
        "set -euo pipefail",
        f"cd {shlex.quote(req.cwd)}",
        *env_lines,
        "# Each task finds its rank in SLURM_PROCID; the master is the first host of the job.",
        f"srun {shlex.join(srun_argv(req)[1:])}",
        "",
    ])


def _master_env(req: LaunchRequest) -> dict:
    env = {}
    if req.master_addr:
        env["MASTER_ADDR"] = req.master_addr
    if req.master_port:
        env["MASTER_PORT"] = str(req.master_port)
    return env


def srun_plan(req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
    """srun starts one task per rank inside a Slurm allocation; outside one, a batch script."""
    inside = req.in_slurm_allocation
    where = "this allocation" if inside else "inside an allocation (salloc/sbatch)"
    command = Command(where, tuple(srun_argv(req)), _master_env(req), runs_here=inside)
    notes = () if inside else ("not inside a Slurm allocation: submit the batch script below "
                               "(write it with --sbatch FILE), or run this inside salloc",)
    return Plan("srun", (command,), req.target, req.nnodes, req.nproc_per_node, notes,
                batch_script=batch_script(req))


BUILDERS = {"spawn": spawn_plan, "torchrun": torchrun_plan, "mpirun": mpirun_plan, "srun": srun_plan}
