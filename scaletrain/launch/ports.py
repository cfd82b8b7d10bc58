"""Picking a free TCP port for a job's rendezvous."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now. Another program could take it before rank 0 binds
    it; that is rare on a test machine and rank 0 then fails fast with "address in use"."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
