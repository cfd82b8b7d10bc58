"""The test bed's link with added latency (testbed/netns.sh shape RATE DELAY): a round trip
between the two hosts takes twice the delay, the addresses and interface name stay as they
were, and `unshape` puts the veth pair back."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest

from tests.helpers import free_port
from tests.test_fault_netns import NETNS, netns, pytestmark, two_hosts  # noqa: F401 - the fixture and the skip

pytestmark = [pytestmark, pytest.mark.skipif(not os.path.exists("/dev/net/tun"),
                                             reason="no /dev/net/tun: this kernel cannot run the delay line")]

ECHO = """
import socket, sys
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("10.77.0.2", int(sys.argv[1]))); server.listen(1); print("ready", flush=True)
peer, _ = server.accept(); peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (data := peer.recv(64)):
    peer.sendall(data)
"""

PING = """
import socket, sys, time
peer = socket.create_connection(("10.77.0.2", int(sys.argv[1])), timeout=10)
peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(15):
    started = time.perf_counter(); peer.sendall(b"x"); peer.recv(64); print(time.perf_counter() - started)
"""


def round_trips() -> list[float]:
    """Seconds of 15 one-byte TCP round trips from host 0 to host 1 over stnet0."""
    port = str(free_port())
    with subprocess.Popen([str(NETNS), "exec", "1", sys.executable, "-c", ECHO, port], stdout=subprocess.PIPE,
                          text=True) as server:
        try:
            assert server.stdout.readline().strip() == "ready"
            done = subprocess.run([str(NETNS), "exec", "0", sys.executable, "-c", PING, port], capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            return [float(line) for line in done.stdout.split()]
        finally:
            server.kill()


def _kind_of_stnet0() -> str:
    return netns("exec", "0", "ip", "-d", "link", "show", "stnet0").stdout


def test_a_delay_each_way_doubles_into_the_round_trip_and_unshape_restores_the_veth_pair(two_hosts):  # noqa: F811
    try:
        netns("shape", "1gbit", "2ms")
        assert "tun" in _kind_of_stnet0() or "netem" in netns("exec", "0", "tc", "qdisc", "show").stdout
        delayed = statistics.median(round_trips())
        assert 0.004 <= delayed < 0.012, f"round trip {delayed * 1e3:.2f} ms with 2 ms each way"
    finally:
        netns("unshape")
    assert "veth" in _kind_of_stnet0()
    plain = statistics.median(round_trips())
    assert plain < 0.002, f"round trip {plain * 1e3:.2f} ms on the veth pair"
