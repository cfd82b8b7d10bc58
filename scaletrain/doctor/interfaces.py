"""Which network interface this machine would use to reach an address (IPv4).

A minimal helper for the doctor: the kernel's own routing answers (a UDP socket "connected"
to the address sends nothing but learns the source address), and the source address is
mapped back to the interface that holds it.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from typing import Optional

_SIOCGIFADDR = 0x8915


def interface_addresses() -> dict[str, str]:
    """{interface name: IPv4 address} for interfaces that have one."""
    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _index, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            found[name] = socket.inet_ntoa(raw[20:24])
    return found


def source_address(destination: str, port: int = 9) -> str:
    """The local address the kernel would send from to reach `destination` (OSError when no
    route leads there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((destination, port))
        return sock.getsockname()[0]


def interface_for(destination: str) -> tuple[Optional[str], str]:
    """(interface name or None, local address) used to reach `destination`."""
    local = source_address(destination)
    for name, address in interface_addresses().items():
        if address == local:
            return name, local
    return None, local


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def is_local(address: str) -> bool:
    return is_loopback(address) or address in interface_addresses().values()
