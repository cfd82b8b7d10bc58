"""From a request to a plan: pick the launcher (auto), fill in what was left out (process
counts, master address and port), check combinations that cannot work, choose the network
interface, then hand over to the launcher's builder."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from .. import netif
from ..environment import detect
from ..errors import UsageError
from .builders import BUILDERS
from .plan import Plan
from .ports import free_port
from .spawn import PORT_AT_START
from .request import DEFAULT_PORT, LaunchRequest, split_endpoint


def pick_launcher(req: LaunchRequest) -> str:
    """auto: Slurm inside an allocation; mpirun when hosts are listed; torchrun for several
    nodes; spawn for one machine."""
    if req.launcher != "auto":
        return req.launcher
    if req.in_slurm_allocation:
        return "srun"
    if req.hosts:
        return "mpirun"
    if (req.nnodes or 1) > 1 or req.rdzv_endpoint:
        return "torchrun"
    return "spawn"


def _slurm_counts(req: LaunchRequest) -> tuple[Optional[int], Optional[int]]:
    env = req.environ
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    tasks = env.get("SLURM_NTASKS")
    nnodes = int(nodes) if nodes and nodes.isdigit() else None
    per_node = int(tasks) // (nnodes or 1) if tasks and tasks.isdigit() else None
    return nnodes, per_node


def _mpirun_hosts(req: LaunchRequest) -> tuple[int, int]:
    """(nodes, processes per node) from --hosts/--hostfile and --nproc-per-node."""
    source = f"--hostfile {req.hostfile}" if req.hostfile else "--hosts"
    if not req.hosts:
        if (req.nnodes or 1) > 1:
            raise UsageError(f"--launcher mpirun with --nnodes {req.nnodes} needs the hosts: "
                             "give --hostfile FILE (lines 'host slots=N') or --hosts a:N,b:N")
        return 1, req.nproc_per_node or req.default_nproc
    if req.nnodes and req.nnodes != len(req.hosts):
        raise UsageError(f"--nnodes {req.nnodes} but {source} lists {len(req.hosts)} host(s); drop --nnodes")
    if req.nproc_per_node:
        return len(req.hosts), req.nproc_per_node
    slots = {s for _, s in req.hosts}
    if slots == {None} and not req.hostfile:
        return len(req.hosts), req.default_nproc  # --hosts a,b: like Open MPI, one slot each unless told
    if slots == {None} or slots == {0} or (0 in slots and None in slots):
        raise UsageError(f"{source} gives no slots; write 'host slots=N' (hostfile) or host:N, "
                         "or pass --nproc-per-node N")
    if len(slots) != 1 or None in slots or 0 in slots:
        raise UsageError(f"{source} gives different slot counts {sorted(s or 0 for s in slots)}; scaletrain runs the "
                         "same number of ranks on every host: pass --nproc-per-node N")
    return len(req.hosts), slots.pop()


def _torchrun_in_slurm_task(req: LaunchRequest) -> LaunchRequest:
    """`srun` started one torchrun per node: nodes, node rank and master come from Slurm."""
    if not (req.environ.get("SLURM_PROCID") and req.environ.get("SLURM_STEP_ID")) or req.rdzv_endpoint:
        return req
    task = detect(req.environ)
    return replace(req, nnodes=req.nnodes or task.nnodes,
                   node_rank=task.node_rank if req.node_rank is None else req.node_rank,
                   master_addr=req.master_addr or task.master_addr, master_port=req.master_port or task.master_port)


def resolve(req: LaunchRequest) -> LaunchRequest:
    """Every field the builder needs, filled in. Picks a free port where one host is involved."""
    launcher = pick_launcher(req)
    if launcher == "mpirun":
        nnodes, nproc = _mpirun_hosts(req)
        addr = req.master_addr or (req.hosts[0][0] if req.hosts else "127.0.0.1")
        if addr == "localhost":
            addr = "127.0.0.1"
        here = netif.is_local_address(addr) if req.hosts else True
        port = req.master_port or (free_port() if here else DEFAULT_PORT)
        return replace(req, launcher=launcher, nnodes=nnodes, nproc_per_node=nproc, master_addr=addr, master_port=port)
    if launcher == "srun":
        nodes, per_node = _slurm_counts(req) if req.in_slurm_allocation else (None, None)
        return replace(req, launcher=launcher, nnodes=req.nnodes or nodes or 1,
                       nproc_per_node=req.nproc_per_node or per_node or req.default_nproc)
    if launcher == "torchrun":
        req = _torchrun_in_slurm_task(req)
    if req.hosts:
        raise UsageError(f"--hostfile/--hosts are for --launcher mpirun, not {launcher}; "
                         "use --launcher mpirun (or auto)")
    nnodes, nproc = req.nnodes or 1, req.nproc_per_node or req.default_nproc
    req = replace(req, node_rank=req.node_rank or 0)
    if not 0 <= req.node_rank < nnodes:
        raise UsageError(f"--node-rank {req.node_rank} must be below --nnodes {nnodes}; number nodes 0..{nnodes - 1}")
    if launcher == "spawn":
        if nnodes > 1 or req.rdzv_endpoint:
            raise UsageError("spawn starts processes on this machine only; for several nodes use --launcher torchrun "
                             "(run on each node) or --launcher mpirun --hostfile FILE")
        return replace(req, launcher=launcher, nnodes=1, nproc_per_node=nproc,
                       master_addr=req.master_addr or "127.0.0.1", master_port=req.master_port or PORT_AT_START)
    # torchrun
    if req.rdzv_endpoint:
        split_endpoint(req.rdzv_endpoint)  # a malformed endpoint fails here, in one line
        return replace(req, launcher=launcher, nnodes=nnodes, nproc_per_node=nproc)
    if nnodes > 1 and not req.master_addr:
        raise UsageError(f"--nnodes {nnodes} needs --master-addr (node 0's address, the same on every node) "
                         "or --rdzv-endpoint host:port")
    if nnodes == 1 and not req.master_port and not req.master_addr:
        # One node, no address asked for: torchrun --standalone binds a free port itself,
        # leaving no gap in which another program could take a port chosen here.
        return replace(req, launcher=launcher, nnodes=1, nproc_per_node=nproc)
    return replace(req, launcher=launcher, nnodes=nnodes, nproc_per_node=nproc,
                   master_addr=req.master_addr or "127.0.0.1", master_port=req.master_port or DEFAULT_PORT)


def rendezvous_host(req: LaunchRequest) -> Optional[str]:
    """The address every rank must reach: the master, or torchrun's rendezvous endpoint."""
    if req.rdzv_endpoint:
        return split_endpoint(req.rdzv_endpoint)[0]
    return req.master_addr


def network_for(req: LaunchRequest) -> Optional[netif.Choice]:
    host = rendezvous_host(req)
    if req.launcher == "srun" or not host:
        return None  # each Slurm task chooses on its own node (in the rank runner)
    return netif.choose(host, req.environ)


def build_plan(req: LaunchRequest, network: Optional[netif.Choice] = None) -> Plan:
    """The plan for an already resolved request (pure)."""
    return BUILDERS[req.launcher](req, network)


def plan_for(req: LaunchRequest) -> tuple[LaunchRequest, Plan]:
    """Resolve, look at the network, build: what `scaletrain launch` does before running."""
    req = resolve(req)
    return req, build_plan(req, network_for(req))
