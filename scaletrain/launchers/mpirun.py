"""The Open MPI launcher: one `mpirun` on this node starts every rank on every host
(through ssh or its agent). MPI only starts the processes: the backend is Gloo or NCCL."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..foundation.defaults import HANG_TIMEOUT_VAR, MASTER_ADDR, MASTER_PORT
from ..foundation.errors import UsageError
from ..memory.allocator import ALLOCATOR_VARS
from ..memory.steady import STEADY_MEMORY_VAR
from ..process import netif
from ..process.netif import IFNAME_VARS, Choice
from .base import Job
from .host_check import check_hosts
from .launch_plan import ERROR_DIR_VAR, TERMINAL_VAR, Command, Plan, rank_argv
from .parent_watch import LAUNCHER_VAR
from .ports import free_port
from .preflight import check_interfaces, check_port_free, check_program, warn_if_oversubscribed
from .processes import run_command
from .request import LaunchRequest


def _hosts_and_slots(req: LaunchRequest) -> tuple[int, int]:
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


def _interface_args(req: LaunchRequest, network: Optional[Choice]) -> list[str]:
    """Keep Open MPI's own wiring on the subnet that reaches the master, unless told otherwise."""
    if req.nnodes < 2 or not network or not network.subnet:
        return []
    args = []
    for param in ("oob_tcp_if_include", "btl_tcp_if_include"):
        if not req.environ.get(f"OMPI_MCA_{param}"):
            args += ["--mca", param, network.subnet]
    return args


class MpirunLauncher:
    name = "mpirun"
    chooses_network = True

    def resolve(self, req: LaunchRequest) -> LaunchRequest:
        nnodes, nproc = _hosts_and_slots(req)
        addr = req.master_addr or (req.hosts[0][0] if req.hosts else MASTER_ADDR)
        if addr == "localhost":
            addr = MASTER_ADDR
        here = netif.is_local_address(addr) if req.hosts else True
        port = req.master_port or (free_port() if here else MASTER_PORT)
        return replace(req, launcher=self.name, nnodes=nnodes, nproc_per_node=nproc, node_rank=None,
                       master_addr=addr, master_port=port)

    def plan(self, req: LaunchRequest, network: Optional[Choice] = None) -> Plan:
        n = req.nproc_per_node
        argv = ["mpirun", "-np", str(n * req.nnodes)]
        if req.hosts:
            argv += ["--host", ",".join(f"{host}:{n}" for host, _slots in req.hosts)]
        if req.is_root:
            argv.append("--allow-run-as-root")  # Open MPI refuses root without it
        if n > req.cpu_cores:
            argv.append("--oversubscribe")  # more ranks than cores: Open MPI refuses without it
        if not any(a.startswith("--bind-to") for a in req.launcher_args):
            # Open MPI binds each rank to one core by default; the ranks divide their host's
            # cores among themselves (threads = cores ÷ ranks there), as under torchrun, so a
            # binding would leave a rank's threads all on one core.
            argv += ["--bind-to", "none"]
        argv += _interface_args(req, network)
        argv += ["-x", f"MASTER_ADDR={req.master_addr}", "-x", f"MASTER_PORT={req.master_port}", "-x", ERROR_DIR_VAR,
                 "-x", LAUNCHER_VAR, "-x", TERMINAL_VAR]
        # Variables the ranks need from this shell; each host's interface is chosen on that host.
        for var in ("PYTHONPATH", STEADY_MEMORY_VAR, HANG_TIMEOUT_VAR, *ALLOCATOR_VARS, *IFNAME_VARS):
            if req.environ.get(var):
                argv += ["-x", var]
        argv += [*req.launcher_args, *rank_argv(req.target, req.timeout, req.python)]
        hosts = ", ".join(h for h, _ in req.hosts) or "this host"
        return Plan(self.name, (Command(f"this host (mpirun starts the ranks on {hosts})", tuple(argv)),),
                    req.target, req.nnodes, n, node_rank=None if req.nnodes > 1 else 0, join_timeout=req.timeout)

    def preflight(self, req: LaunchRequest) -> None:
        check_program(self.name, req.environ)
        if not req.hosts:  # every rank runs here (with hosts, each host's interfaces are its own)
            check_interfaces(req)
            warn_if_oversubscribed(req)
        if netif.is_local_address(req.master_addr):
            check_port_free(req, req.master_addr, req.master_port)
        # Last: each other host answers and runs scaletrain (a few seconds, where the rest is instant).
        check_hosts([h for h, _ in req.hosts], req.python, req.environ, req.launcher_args,
                    f"--hostfile {req.hostfile}" if req.hostfile else "--hosts")

    def execute(self, plan: Plan, job: Job) -> int:
        (command,) = plan.commands
        return run_command(command, job.error_dir, job.interrupts)


LAUNCHER = MpirunLauncher()
