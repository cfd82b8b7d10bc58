"""Checks made just before a plan runs, each of which would otherwise be a hang or a
buried error: the launcher's program is missing, an interface variable names no interface,
the port is taken, the master address is not this host's, nothing answers at the master.
Each fails in one line naming the fix. The launchers pick the ones that apply to them."""

from __future__ import annotations

import errno
import shutil
import socket
import sys
import time

from ..foundation.errors import UsageError
from ..process import netif
from .ports import bind_error, free_port
from .request import LaunchRequest

INSTALL_HINT = {"mpirun": "apt-get install openmpi-bin", "srun": "apt-get install slurm-wlm"}
UNREACHABLE = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL)


def check_program(name: str, environ) -> None:
    if shutil.which(name, path=environ.get("PATH")) is None:
        raise UsageError(f"{name} was not found on PATH; install it ({INSTALL_HINT.get(name, name)}) "
                         f"or choose another --launcher (torchrun or spawn)")


def check_interfaces(req: LaunchRequest) -> None:
    """GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME naming an interface this host lacks."""
    netif.check_interfaces(req.environ)


def warn_if_oversubscribed(req: LaunchRequest) -> None:
    """More ranks on this host than cores works (every wait is bounded by --timeout, not
    by a short connect limit), but slowly: say so."""
    if req.nproc_per_node and req.nproc_per_node > req.cpu_cores:
        print(f"scaletrain: warning: {req.nproc_per_node} processes on {req.cpu_cores} CPU core(s) of this host: "
              "each gets a fraction of a core, so start-up and every step are slow "
              f"(--nproc-per-node {req.cpu_cores} gives each its own core)", file=sys.stderr, flush=True)


def check_local_master(req: LaunchRequest) -> None:
    """The ranks of this host join a rendezvous this host serves: --master-addr must be one
    of this host's addresses, or start-up waits minutes for a store nobody hosts."""
    host = req.master_addr
    if host and not netif.is_local_address(host):
        addrs = ", ".join(i.address for i in netif.local_interfaces() if i.name != "lo") or "none"
        raise UsageError(f"--master-addr {host} is not an address of this host, but --launcher {req.launcher} runs "
                         f"every rank here; leave --master-addr out (127.0.0.1) or give one of this host's "
                         f"addresses ({addrs})")


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
                             "or wait longer with --connect-timeout")
        time.sleep(1.0)
