"""The doctor's checks. Each returns Findings: what was found and, for a problem, the fix."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Optional

from ..process import netif


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _addresses() -> dict[str, str]:
    """{interface name: IPv4 address} of this host."""
    return {i.name: i.address for i in netif.local_interfaces()}


def _interface_for(address: str) -> tuple[Optional[str], str]:
    """(interface or None, local address) the kernel's route to `address` leaves from."""
    local = netif.route_source(address)
    return next((name for name, mine in _addresses().items() if mine == local), None), local

OK, NOTE, PROBLEM = "ok", "note", "PROBLEM"


@dataclass(frozen=True)
class Finding:
    level: str
    what: str
    fix: str = ""


@dataclass(frozen=True)
class Plan:
    """The launch being checked."""

    master_addr: str
    master_port: int
    nnodes: int
    backend: Optional[str]
    is_master_node: bool


def check_backends(plan: Plan) -> list[Finding]:
    from ..process.backends import available_backends, usable_backends

    usable = usable_backends()
    found = [Finding(OK if usable else PROBLEM, f"backends usable here: {', '.join(usable) or 'none'}",
                     "" if usable else "install a torch build with Gloo")]
    if plan.backend:
        why = available_backends().get(plan.backend, "no: unknown backend")
        if why != "yes":
            found.append(Finding(PROBLEM, f"backend {plan.backend}: {why[4:]}",
                                 f"use --backend {usable[0] if usable else 'gloo'} (or leave --backend out)"))
    return found


def check_hostname(plan: Plan) -> list[Finding]:
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        level = PROBLEM if plan.nnodes > 1 else NOTE
        return [Finding(level, f"hostname {name!r} does not resolve",
                        f"add '{name}' with this machine's address to /etc/hosts, or set MASTER_ADDR and "
                        "GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME) explicitly")]
    if _is_loopback(address):
        if plan.nnodes > 1:
            return [Finding(PROBLEM, f"hostname {name!r} resolves to {address} (loopback): other machines cannot "
                                     "reach this one by it, and libraries that advertise it make peers connect "
                                     "to themselves",
                            "set GLOO_SOCKET_IFNAME=<interface> (NCCL_SOCKET_IFNAME for NCCL) on every node and "
                            "MASTER_ADDR to the master's routable address, or map the hostname to this machine's "
                            "address in /etc/hosts")]
        return [Finding(NOTE, f"hostname {name!r} resolves to {address} (loopback): fine on one machine, a trap "
                              "for several (run `scaletrain doctor --nnodes N` on each)")]
    return [Finding(OK, f"hostname {name!r} resolves to {address}")]


def check_master(plan: Plan) -> list[Finding]:
    try:
        address = socket.gethostbyname(plan.master_addr)
    except OSError:
        return [Finding(PROBLEM, f"master address {plan.master_addr!r} does not resolve",
                        "set MASTER_ADDR (or --master-addr) to rank 0's IP address or a resolvable name")]
    try:
        iface, local = _interface_for(address)
    except OSError as exc:
        return [Finding(PROBLEM, f"no route to the master {address}: {exc.strerror}",
                        "check MASTER_ADDR; it must be an address of rank 0's machine reachable from here")]
    found = []
    if plan.nnodes > 1 and _is_loopback(address):
        found.append(Finding(PROBLEM, f"master address {plan.master_addr} is loopback but the job spans "
                                      f"{plan.nnodes} nodes",
                             "set MASTER_ADDR to the master's address on the network the nodes share"))
    found.append(Finding(OK, f"master {plan.master_addr} ({address}) is reached through interface "
                             f"{iface or '?'} from {local}"))
    found += _check_ifname(plan, iface)
    if _is_loopback(address) or address in _addresses().values():
        found.append(_check_port_free(address, plan.master_port))
        return found
    if plan.is_master_node:
        mine = ", ".join(f"{n} {a}" for n, a in _addresses().items())
        found.append(Finding(PROBLEM, f"this is node 0, where rank 0 runs, but the master address {address} is not "
                                      f"one of this machine's ({mine})",
                             "on node 0 set MASTER_ADDR to one of its own addresses; on the other nodes give their "
                             "--node-rank (torchrun --node-rank, or let mpirun/srun number the nodes)"))
    found.append(_check_port_reachable(address, plan.master_port))
    return found


def _check_ifname(plan: Plan, routed: Optional[str]) -> list[Finding]:
    found = []
    unknown = {var: missing for var, _value, missing in netif.unknown_interfaces(os.environ)}
    for var in netif.IFNAME_VARS:
        value = os.environ.get(var)
        if not value:
            continue
        if var in unknown:
            found.append(Finding(PROBLEM, f"{var}={value}: no interface {', '.join(unknown[var])} here "
                                          f"(have: {', '.join(sorted(netif.interface_names()))})",
                                 f"set {var} to the interface that reaches the master ({routed or 'see above'})"))
        elif routed and value != routed and not value.startswith("^"):
            found.append(Finding(NOTE, f"{var}={value}, but the route to the master uses {routed}"))
        else:
            found.append(Finding(OK, f"{var}={value}"))
    if plan.nnodes > 1 and not any(os.environ.get(v) for v in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")):
        found.append(Finding(NOTE, f"GLOO_SOCKET_IFNAME is not set: Gloo will pick the interface of the hostname's "
                                   f"address; setting GLOO_SOCKET_IFNAME={routed or '<interface>'} makes it certain"))
    return found


def _check_port_free(address: str, port: int) -> Finding:
    from ..launchers.ports import bind_error, free_port

    exc = bind_error("" if _is_loopback(address) else address, port)
    if exc is None:
        return Finding(OK, f"port {port} is free on this (master) machine")
    if exc.errno == errno.EADDRINUSE:
        return Finding(PROBLEM, f"port {port} on this (master) machine is already in use",
                       f"use another port: MASTER_PORT={free_port()} (or --master-port), or stop the "
                       "program holding it")
    return Finding(PROBLEM, f"cannot listen on {address}:{port}: {exc.strerror}",
                   "choose a MASTER_PORT from 1024 to 65535 that this user may bind")


def _check_port_reachable(address: str, port: int, timeout_s: float = 3.0) -> Finding:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect((address, port))
        except ConnectionRefusedError:
            return Finding(OK, f"master {address} answers (nothing listens on port {port} yet: normal before rank 0 "
                               "starts)")
        except (TimeoutError, socket.timeout):
            return Finding(PROBLEM, f"master {address}:{port} does not answer within {timeout_s:g} s",
                           "a firewall drops the traffic or the address is wrong: open the port between the nodes "
                           "or fix MASTER_ADDR")
        except OSError as exc:
            return Finding(PROBLEM, f"cannot reach master {address}:{port}: {exc.strerror}",
                           "fix MASTER_ADDR or the network between the nodes")
    return Finding(OK, f"master {address}:{port} accepts connections (rank 0 is up, or another program holds the "
                       "port)")


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_self_test(backend: Optional[str], timeout_s: float) -> list[Finding]:
    from .selftest import run_self_test

    chosen = backend or "gloo"
    found, world_size = [], 2
    if chosen == "nccl" and _visible_gpus() == 1:
        world_size = 1
        found.append(Finding(NOTE, "one GPU: NCCL takes a GPU per process, so the self-test runs one process and a "
                                   "job on this machine can have one process per node"))
    passed, what = run_self_test(chosen, timeout_s, world_size)
    if passed:
        return [*found, Finding(OK, what)]
    return [*found, Finding(PROBLEM, f"{world_size}-rank {chosen} all-reduce self-test failed: {what}",
                            _self_test_fix(chosen))]


def _self_test_fix(backend: str) -> str:
    """The fix for a failed self-test, by its likely cause."""
    unknown = netif.unknown_interfaces(os.environ)
    if unknown:
        var, value, _missing = unknown[0]
        return (f"the self-test's processes use {var}={value} too, which names no interface here: set it to one "
                f"that exists ({', '.join(sorted(netif.interface_names()))}) or unset it")
    if backend != "gloo":
        return "run `scaletrain env` to see the usable backends; without a GPU use --backend gloo"
    return ("run `scaletrain env` and check the network on this machine: loopback must accept connections (a "
            "firewall rule on lo?), and GLOO_SOCKET_IFNAME, when set, must name a working interface")


def check_allocator() -> list[Finding]:
    """The CPU memory allocator training processes get by default (scaletrain/memory/allocator.py),
    and why; where none of the preferred ones is installed, the one line that installs the first."""
    from ..memory import allocator

    chosen = allocator.resolve("auto")
    why = allocator.reason("auto", False, chosen)
    if chosen != "glibc":
        return [Finding(OK, f"CPU memory allocator: {chosen} ({allocator.find(chosen)}), preloaded into the processes "
                            f"scaletrain starts: {why}")]
    first = allocator.PREFERENCE[0]
    return [Finding(NOTE, f"CPU memory allocator: glibc's malloc, since none of {', '.join(allocator.PREFERENCE)} is "
                          "installed; it holds more memory under FSDP and runs slower (docs/memory.md)",
                    f"{allocator.install_line(first)}")]
