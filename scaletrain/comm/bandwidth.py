"""Algorithm and bus bandwidth, with the factors nccl-tests uses.

algbw = S / t, where S is the message size as nccl-tests counts it (for all_gather the
whole gathered output, for reduce_scatter the whole input). busbw = algbw × factor, the
factor being the share of S each rank must send over its link in the optimal algorithm, so
that busbw can be compared with the link's speed whatever the number of ranks n:

    all_reduce      2(n-1)/n     (a reduce-scatter then an all-gather)
    all_gather      (n-1)/n
    reduce_scatter  (n-1)/n
    broadcast       1
    sendrecv        1
    all_to_all      (n-1)/n      (each rank keeps 1/n of its S bytes, sends the rest; not run by default)
"""

from __future__ import annotations

import re

from ..foundation.errors import UsageError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv")
#: Every collective `--ops` may name: the default ones, and expert parallel's all-to-all.
KNOWN_OPS = (*OPS, "all_to_all")


def bus_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv"):
        return 1.0
    raise UsageError(f"unknown collective {op!r}; choose from: {', '.join(KNOWN_OPS)} (--ops)")


def buffer_bytes(op: str, nbytes: int, n: int) -> float:
    """Bytes of the buffers one rank holds for `op` at message size `nbytes` on `n` ranks
    (see comm.collectives: all_gather's and reduce_scatter's S is the whole, each rank's
    part S/n; a send/recv ring holds a buffer to send and one to receive)."""
    parts = {"all_gather": 1 + 1 / n, "reduce_scatter": 1 + 1 / n, "sendrecv": 2.0, "all_to_all": 2.0}
    return nbytes * parts.get(op, 1.0)


def algbw(nbytes: float, seconds: float) -> float:
    """Bytes per second."""
    return nbytes / seconds if seconds > 0 else float("inf")


def busbw(op: str, nbytes: float, seconds: float, n: int) -> float:
    return algbw(nbytes, seconds) * bus_factor(op, n)


_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "M": 1024**2, "MB": 1024**2, "G": 1024**3, "GB": 1024**3}


def parse_size(text: str) -> int:
    """'16M' -> 16 MiB; '4096' -> 4096 bytes; powers of 1024 as nccl-tests uses."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?B?)\s*", text.upper())
    if not match:
        raise UsageError(f"--sizes: cannot read {text!r} as a size; write e.g. 4K, 1M, 16M or 4096")
    value = int(match.group(1)) * _UNITS[match.group(2)]
    if value < 1:
        raise UsageError(f"--sizes: {text!r} is empty; sizes must be at least 1 byte")
    return value


def parse_sizes(text: str) -> list[int]:
    """'1K,1M,16M' (a list) or '1K:16M' (every power of 4 from one to the other)."""
    if ":" in text:
        low_text, _, high_text = text.partition(":")
        low, high = parse_size(low_text), parse_size(high_text)
        if low > high:
            raise UsageError(f"--sizes {text}: the range must go from small to large, e.g. 1K:16M")
        sizes = []
        size = low
        while size <= high:
            sizes.append(size)
            size *= 4
        return sizes
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise UsageError("--sizes is empty; write e.g. --sizes 1K:16M or --sizes 1M,16M")
    return sizes


def human_bytes(n: float) -> str:
    for unit, size in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{int(n)}B"
