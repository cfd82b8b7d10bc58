"""Checks made just before a plan runs, each of which would otherwise be a hang or a
buried error: the launcher's program is missing, the port is taken, the master address is
not this host's, or nothing answers at the master. Each fails in one line naming the fix."""

from __future__ import annotations

import errno
import shutil
import socket
import time

from .. import netif
from ..errors import UsageError
from .planner import rendezvous_host
from .ports import bind_error, free_port
from .request import LaunchRequest, split_endpoint
from .spawn import PORT_AT_START

INSTALL_HINT = {"mpirun": "apt-get install openmpi-bin", "srun": "apt-get install slurm-wlm"}
UNREACHABLE = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL)


def check_program(name: str, environ) -> None:
    if shutil.which(name, path=environ.get("PATH")) is None:
        raise UsageError(f"{name} was not found on PATH; install it ({INSTALL_HINT.get(name, name)}) "
                         f"or choose another --launcher (torchrun or spawn)")


def _port_flag(req: LaunchRequest) -> str:
    return "--rdzv-endpoint host:PORT" if req.rdzv_endpoint else "--master-port"


def check_port_free(req: LaunchRequest, host: str, port: int) -> None:
    """This host serves the rendezvous: the address must be ours and the port free."""
    exc = bind_error(netif.resolve(host), port)
    if exc is None:
        return
    if exc.errno == errno.EADDRINUSE:
        raise UsageError(f"port {port} is already in use on this host (another job?); choose another "
                         f"{_port_flag(req)}, e.g. {free_port()}")
    if exc.errno == errno.EADDRNOTAVAIL:
        addrs = ", ".join(i.address for i in netif.local_interfaces() if i.name != "lo") or "none"
        raise UsageError(f"{host} is not an address of this host, but this node hosts the rendezvous "
                         f"(--node-rank 0); give one of this host's addresses ({addrs})")
    raise exc


def wait_for_master(req: LaunchRequest, host: str, port: int, attempt_s: float = 3.0) -> None:
    """Another node serves the rendezvous: wait until it answers. "Refused" means it is not
    started yet (keep waiting, up to --connect-timeout); "unreachable" or silence means a
    wrong address or a firewall, which waiting cannot fix."""
    ip = netif.resolve(host)
    deadline = time.monotonic() + req.connect_timeout
    silent = 0
    while True:
        try:
            with socket.create_connection((ip, port), timeout=attempt_s):
                return
        except ConnectionRefusedError:
            silent = 0
        except socket.timeout:
            silent += 1
        except OSError as exc:
            if exc.errno not in UNREACHABLE:
                raise
            silent += 1
        if silent >= 3:
            raise UsageError(f"no answer from the master {host}:{port} ({ip} is unreachable or a firewall drops the "
                             "connection); give --master-addr (or --rdzv-endpoint) the address of node 0 as this "
                             "host reaches it")
        if time.monotonic() > deadline:
            raise UsageError(f"nothing is listening at the master {host}:{port} after {req.connect_timeout:g} s; "
                             f"start node 0 first, give every node the same {_port_flag(req)}, "
                             "or wait longer with --connect-timeout SECONDS")
        time.sleep(1.0)


def serves_rendezvous(req: LaunchRequest, host: str) -> bool:
    if req.launcher in ("spawn", "mpirun"):
        return netif.is_local_address(host)
    if req.rdzv_endpoint:
        return netif.is_local_address(host)
    return req.node_rank == 0


def check(req: LaunchRequest) -> None:
    """All checks for a resolved request about to run here."""
    if req.launcher in ("mpirun", "srun"):
        check_program(req.launcher, req.environ)
    if req.launcher == "srun":
        if not req.in_slurm_allocation:
            raise UsageError("not inside a Slurm allocation (no SLURM_JOB_ID): run inside salloc or sbatch, "
                             "or write a batch script with --sbatch FILE (or look first with --dry-run)")
        return
    host = rendezvous_host(req)
    port = split_endpoint(req.rdzv_endpoint)[1] if req.rdzv_endpoint else req.master_port
    if host is None or port == PORT_AT_START:  # the port is picked as it is bound
        return
    if serves_rendezvous(req, host):
        check_port_free(req, host, port)
    elif req.launcher == "torchrun":
        wait_for_master(req, host, port)
