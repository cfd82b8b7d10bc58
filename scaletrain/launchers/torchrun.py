"""The torchrun launcher: torch's elastic agent on this node; with several nodes, every node
runs the same command (static rendezvous with --node-rank, or c10d where the nodes number
themselves). Inside an srun task, the nodes, node rank and master come from Slurm."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..foundation.defaults import MASTER_ADDR, MASTER_PORT
from ..foundation.durations import format_duration
from ..foundation.errors import UsageError
from ..process import netif
from ..process.environment import detect
from ..process.netif import Choice
from .base import Job, network_env
from .launch_plan import RANK_RUNNER, Command, Plan, runner_args
from .preflight import check_interfaces, check_port_free, wait_for_master, warn_if_oversubscribed
from .processes import run_command
from .request import LaunchRequest, rendezvous, split_endpoint


def _inside_slurm_task(req: LaunchRequest) -> LaunchRequest:
    """`srun` started one torchrun per node: nodes, node rank and master come from Slurm."""
    if not (req.environ.get("SLURM_PROCID") and req.environ.get("SLURM_STEP_ID")) or req.rdzv_endpoint:
        return req
    task = detect(req.environ)
    return replace(req, nnodes=req.nnodes or task.nnodes,
                   node_rank=task.node_rank if req.node_rank is None else req.node_rank,
                   master_addr=req.master_addr or task.master_addr, master_port=req.master_port or task.master_port)


class TorchrunLauncher:
    name = "torchrun"
    chooses_network = True

    def resolve(self, req: LaunchRequest) -> LaunchRequest:
        req = _inside_slurm_task(req)
        if req.hosts:
            raise UsageError("--hostfile/--hosts are for --launcher mpirun, not torchrun; "
                             "use --launcher mpirun (or auto)")
        nnodes, nproc = req.nnodes or 1, req.nproc_per_node or req.default_nproc
        node_rank = req.node_rank or 0
        if not 0 <= node_rank < nnodes:
            raise UsageError(f"--node-rank {node_rank} must be below --nnodes {nnodes}; number nodes 0..{nnodes - 1}")
        req = replace(req, launcher=self.name, nnodes=nnodes, nproc_per_node=nproc, node_rank=node_rank)
        if req.rdzv_endpoint:
            split_endpoint(req.rdzv_endpoint)  # a malformed endpoint fails here, in one line
            return replace(req, node_rank=None)  # the rendezvous numbers the nodes
        if nnodes > 1 and not req.master_addr:
            raise UsageError(f"--nnodes {nnodes} needs --master-addr (node 0's address, the same on every node) "
                             "or --rdzv-endpoint host:port")
        if nnodes == 1 and not req.master_port and not req.master_addr:
            # One node, no address asked for: torchrun --standalone binds a free port itself,
            # leaving no gap in which another program could take a port chosen here.
            return req
        return replace(req, master_addr=req.master_addr or MASTER_ADDR, master_port=req.master_port or MASTER_PORT)

    def plan(self, req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
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
        argv += [*req.launcher_args, "-m", RANK_RUNNER, *runner_args(req.target, req.timeout)]
        return Plan(self.name, (Command(where, tuple(argv), network_env(network)),), req.target, req.nnodes,
                    req.nproc_per_node, node_rank=req.node_rank, join_timeout=req.timeout, notes=tuple(notes))

    def preflight(self, req: LaunchRequest) -> None:
        check_interfaces(req)
        warn_if_oversubscribed(req)
        host, port = rendezvous(req)
        if host is None:
            return  # --standalone: torchrun binds a free port itself
        serves = netif.is_local_address(host) if req.rdzv_endpoint else req.node_rank == 0
        if serves:
            check_port_free(req, host, port)
        else:
            wait_for_master(req, host, port)

    def execute(self, plan: Plan, job: Job) -> int:
        (command,) = plan.commands
        join = None
        if plan.join_timeout and (plan.nnodes > 1 or plan.node_rank is None):
            # torchrun's rendezvous of the nodes comes before any rank starts, so the ranks'
            # own start-up bound cannot apply to it: this one does.
            join = (plan.join_timeout, lambda: _nodes_missing(plan))
        return run_command(command, job.error_dir, job.interrupts, stop_below=True, join=join)


def _nodes_missing(plan: Plan) -> str:
    label = format_duration(plan.join_timeout)
    argv = list(plan.commands[0].argv)
    where = argv[argv.index("--rdzv-endpoint") + 1] if "--rdzv-endpoint" in argv else \
        f"{argv[argv.index('--master-addr') + 1]}:{argv[argv.index('--master-port') + 1]}"
    others = "the other node(s)" if plan.node_rank is None else \
        "node(s) " + ", ".join(str(r) for r in range(plan.nnodes) if r != plan.node_rank)
    each = "" if plan.node_rank is None else " (each with its own --node-rank)"
    return (f"torchrun's rendezvous of {plan.nnodes} nodes at {where} did not complete within {label}: {others} "
            f"never joined, so no rank started here; start the same command on every node{each}, check that "
            f"they reach {where}, or wait longer with --timeout (--timeout {label})")


LAUNCHER = TorchrunLauncher()
