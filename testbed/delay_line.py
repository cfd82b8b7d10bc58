#!/usr/bin/env python3
"""testbed/delay_line.py - a link with latency between the test bed's two hosts, where the
kernel has no netem (tc's delaying queue discipline).

    delay_line.py DELAY NS0 NS1 [IFNAME]      (DELAY: 500us, 2ms, ...; IFNAME: stnet0)

Each namespace holds a TUN device IFNAME (netns.sh creates them); this process opens both and
carries every IP packet one host sends to the other after DELAY, in order: the wire of a link
whose one-way latency is DELAY. tc's token bucket on the TUN devices caps the rate as on the
veth pair. Runs in the foreground until killed (netns.sh starts it in the background).

Packets are whole IP packets of up to the devices' MTU (netns.sh sets 65000, so a TCP segment
is one read and one write), held in a first-in-first-out queue per direction: the delay is the
same for every packet, so the queue is already in the order they are due.
"""

from __future__ import annotations

import collections
import ctypes
import fcntl
import os
import re
import select
import struct
import sys
import time

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
LARGEST_PACKET = 65536

_libc = ctypes.CDLL(None, use_errno=True)


def seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", text)
    if not match:
        raise SystemExit(f"delay_line.py: delay '{text}': give it as Nus, Nms or Ns (e.g. 500us, 2ms)")
    return float(match[1]) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[match[2]]


def _enter(namespace_fd: int) -> None:
    if _libc.setns(namespace_fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def open_tun(namespace: str, name: str) -> int:
    """The TUN device `name` of `namespace`, opened from inside it (a device is looked up in
    the opener's namespace); the file stays attached to it after this process leaves."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    _enter(there)
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
        return fd
    finally:
        _enter(home)
        os.close(there)
        os.close(home)


def carry(ends: tuple[int, int], delay: float) -> None:
    """Forever: what arrives on one end leaves by the other `delay` later."""
    waiting = {end: collections.deque() for end in ends}  # queued at the end it leaves by
    other = {ends[0]: ends[1], ends[1]: ends[0]}
    while True:
        now = time.monotonic()
        for end, queue in waiting.items():
            while queue and queue[0][0] <= now:
                try:
                    os.write(end, queue.popleft()[1])
                except BlockingIOError:  # the receiving stack is full: the packet is lost, as on a wire
                    pass
        due = [queue[0][0] for queue in waiting.values() if queue]
        timeout = max(0.0, min(due) - time.monotonic()) if due else None
        readable, _, _ = select.select(list(ends), [], [], timeout)
        arrived = time.monotonic()
        for end in readable:
            while True:
                try:
                    packet = os.read(end, LARGEST_PACKET)
                except BlockingIOError:
                    break
                waiting[other[end]].append((arrived + delay, packet))


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: delay_line.py DELAY NS0 NS1 [IFNAME]", file=sys.stderr)
        return 2
    delay = seconds(argv[0])
    name = argv[3] if len(argv) == 4 else "stnet0"
    carry((open_tun(argv[1], name), open_tun(argv[2], name)), delay)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
