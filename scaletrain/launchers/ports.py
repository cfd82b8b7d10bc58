"""Picking a free TCP port for a job's rendezvous."""

from __future__ import annotations

import socket
from typing import Optional


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now. Another program could take it before rank 0 binds
    it; that is rare on a test machine and rank 0 then fails fast with "address in use"."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def bind_error(ip: str, port: int) -> Optional[OSError]:
    """None when this host could listen on ip:port now ("" for every address), else the
    error binding raised (EADDRINUSE: taken; EADDRNOTAVAIL: not an address of this host)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ip, port))
        except OSError as exc:
            return exc
    return None
