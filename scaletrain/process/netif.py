"""Which network interface reaches the master: the choice, and why.

On a machine with several interfaces (or inside a container or network namespace, where the
hostname resolves to 127.0.x.x), Gloo and NCCL guess an address from the hostname and may
hand their peers one nobody can reach; the job then hangs at "initializing distributed".
The kernel already knows the answer: the interface whose route reaches the master address.
We ask it (a UDP `connect` sends no packet, it only selects the route and source address),
then name that interface in GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME unless the user set them.

`choose()` is pure given its two lookups (interfaces, route); `apply()` sets the variables.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import socket
import struct
from dataclasses import dataclass, field
from typing import Callable, Mapping, MutableMapping, Optional

from ..foundation.errors import UsageError

IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class Interface:
    name: str
    address: str
    prefixlen: int

    @property
    def network(self) -> str:
        return str(ipaddress.ip_interface(f"{self.address}/{self.prefixlen}").network)


@dataclass(frozen=True)
class Choice:
    """What was chosen to reach the master, and why (lines a person can read)."""

    master_addr: str
    master_ip: Optional[str] = None
    interface: Optional[Interface] = None      # None: loopback (one host) or unknown
    set_vars: dict = field(default_factory=dict)   # variables scaletrain sets
    user_vars: dict = field(default_factory=dict)  # variables the user had set: left alone
    reasons: tuple = ()

    @property
    def local_addr(self) -> Optional[str]:
        """This host's address as the master sees it (for torchrun's --local-addr)."""
        return self.interface.address if self.interface else None

    @property
    def master_is_here(self) -> bool:
        """The master address is one of this host's own (non-loopback) addresses."""
        return self.interface is not None and self.interface.address == self.master_ip

    @property
    def subnet(self) -> Optional[str]:
        return self.interface.network if self.interface else None

    def as_dict(self) -> dict:
        return {"master_addr": self.master_addr, "master_ip": self.master_ip,
                "interface": self.interface.name if self.interface else None, "local_addr": self.local_addr,
                "subnet": self.subnet, "set": dict(self.set_vars), "user_set": dict(self.user_vars),
                "reasons": list(self.reasons)}


# -- looking things up (the only impure part) ---------------------------------------------

def resolve(host: str) -> str:
    """The IPv4 address of `host`; a UsageError naming the fix when it has none."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror:
        raise UsageError(f"master address {host!r} does not resolve to an IPv4 address; "
                         f"give node 0's IP address with --master-addr") from None


def route_source(ip: str) -> str:
    """The source address the kernel would use to reach `ip`. Raises OSError (ENETUNREACH)
    when no route leads there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((ip, 9))  # UDP connect: picks a route, sends nothing
        return sock.getsockname()[0]


def local_interfaces() -> list[Interface]:
    """IPv4 interfaces of this host (network namespace), read with ioctl: no `ip` needed."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _index, name in socket.if_nameindex():
            packed = struct.pack("256s", name.encode()[:15])
            try:
                addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x8915, packed)[20:24])  # SIOCGIFADDR
                mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x891B, packed)[20:24])  # SIOCGIFNETMASK
            except OSError:  # interface without an IPv4 address, or down
                continue
            found.append(Interface(name, addr, ipaddress.ip_network(f"0.0.0.0/{mask}").prefixlen))
    return found


def interface_names() -> list[str]:
    """Every interface of this host (network namespace), with or without an address."""
    return [name for _index, name in socket.if_nameindex()]


def unknown_interfaces(environ: Mapping[str, str], names: Optional[list[str]] = None) -> list[tuple[str, str, list]]:
    """(variable, value, names not found here) for each interface variable that names an
    interface this host does not have. Gloo takes exact names (a comma-separated list);
    NCCL takes prefixes (`eth` matches eth0), `=name` for an exact one, `^...` to exclude."""
    names = interface_names() if names is None else names
    found = []
    for var in IFNAME_VARS:
        value = environ.get(var, "")
        if not value or value.startswith("^"):
            continue
        nccl = var.startswith("NCCL") and not value.startswith("=")
        wanted = [w for w in value.lstrip("=").split(",") if w]
        missing = [w for w in wanted if not any(n == w or (nccl and n.startswith(w)) for n in names)]
        if missing:
            found.append((var, value, missing))
    return found


def check_interfaces(environ: Mapping[str, str]) -> None:
    """UsageError naming the variable when it names an interface this host lacks: Gloo
    would fail deep inside start-up (or, on other hosts, hang)."""
    problems = unknown_interfaces(environ)
    if problems:
        var, value, missing = problems[0]
        raise UsageError(f"{var}={value} names no interface of this host ({', '.join(missing)} not found; "
                         f"interfaces here: {', '.join(interface_names())}); unset {var} or name one of those")


def is_local_address(host: str, interfaces: Optional[list[Interface]] = None) -> bool:
    """Whether `host` names this host (one of its addresses, or loopback)."""
    try:
        ip = resolve(host)
    except UsageError:
        return False
    if ipaddress.ip_address(ip).is_loopback:
        return True
    return any(i.address == ip for i in (local_interfaces() if interfaces is None else interfaces))


def hostname_note(hostname: Optional[str] = None) -> Optional[str]:
    """The classic trap: the hostname resolves to loopback, so whatever guesses an address
    from it gives peers 127.0.x.x."""
    hostname = hostname or socket.gethostname()
    try:
        ip = socket.getaddrinfo(hostname, None, socket.AF_INET)[0][4][0]
    except socket.gaierror:
        return f"the hostname {hostname!r} does not resolve; peers cannot find this host by name"
    if ipaddress.ip_address(ip).is_loopback:
        return (f"the hostname {hostname!r} resolves to {ip} (loopback): peers on other hosts cannot reach "
                f"that, so the interface must be named (scaletrain names it when the master is on another host)")
    return None


# -- the choice (pure) --------------------------------------------------------------------

def choose(master_addr: str, environ: Mapping[str, str], *,
           interfaces: Optional[list[Interface]] = None,
           route: Callable[[str], str] = route_source,
           resolver: Callable[[str], str] = resolve) -> Choice:
    """The interface whose route reaches `master_addr`, and the variables that name it.

    Raises UsageError when no route leads to the master (the job could only hang)."""
    user = {k: environ[k] for k in IFNAME_VARS if environ.get(k)}
    ip = resolver(master_addr)
    if ipaddress.ip_address(ip).is_loopback:
        return Choice(master_addr, ip, None, {}, user,
                      (f"master {master_addr} is loopback: every process is on this host, nothing to choose",))
    try:
        source = route(ip)
    except OSError as exc:
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            raise UsageError(f"no network route from this host to the master address {master_addr} ({ip}); "
                             f"give --master-addr an address of node 0 that this host can reach") from None
        raise
    interfaces = local_interfaces() if interfaces is None else interfaces
    iface = next((i for i in interfaces if i.address == source), None)
    if iface is None:
        return Choice(master_addr, ip, None, {}, user,
                      (f"route to {ip} leaves from {source}, which no interface here holds; nothing set",))
    how = "is this host's own address on" if source == ip else "is reached via"
    reasons = [f"master {master_addr} ({ip}) {how} {iface.name} ({iface.address}/{iface.prefixlen})"]
    if iface.name == "lo" or ipaddress.ip_address(source).is_loopback:
        reasons.append("that is loopback: one host, nothing to set")
        return Choice(master_addr, ip, None, {}, user, tuple(reasons))
    chosen = {k: iface.name for k in IFNAME_VARS if k not in user}
    for k, v in user.items():
        reasons.append(f"{k}={v} was set by you: left alone")
    if chosen:
        reasons.append(f"so {', '.join(f'{k}={v}' for k, v in chosen.items())}")
    return Choice(master_addr, ip, iface, chosen, user, tuple(reasons))


def apply(master_addr: str, environ: MutableMapping[str, str]) -> Choice:
    """Chooses for `master_addr` and sets the variables in `environ` (those the user left unset)."""
    choice = choose(master_addr, environ)
    for key, value in choice.set_vars.items():
        environ.setdefault(key, value)
    return choice
