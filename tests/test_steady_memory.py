"""--steady-memory: freed large tensors go back to the system (a real process, its resident
memory read from /proc), and the non-finite check makes no copy of a tensor's size."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from scaletrain.memory.steady import STEADY_MEMORY_VAR, wanted
from scaletrain.train.finite import _finite

#: Allocates, touches and frees a 16 MB tensor twice, printing how much resident memory the
#: second free gave back (MB). glibc maps the first one on its own and then raises its mmap
#: threshold past 16 MB, so by default the second lands in the heap and stays resident.
_PROBE = textwrap.dedent("""
    import re, sys
    import torch
    import scaletrain
    def rss():
        return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
    with scaletrain.init(strategy="single", pin=False):
        for _ in range(2):
            x = torch.empty(4 << 20).fill_(1.0)
            held = rss()
            del x
        print(held - rss())
""")


def _returned_mb(steady: bool) -> float:
    env = {STEADY_MEMORY_VAR: "1"} if steady else {STEADY_MEMORY_VAR: ""}
    import os

    # glibc's allocator is what the flag tunes: no other preloaded (an in-process command may have
    # put the default one, tcmalloc, into this process's environment for what it starts).
    inherited = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120,
                          env={**inherited, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator and /proc are Linux's")
def test_steady_memory_gives_freed_tensors_back():
    assert _returned_mb(steady=True) > 14      # the 16 MB went back
    assert _returned_mb(steady=False) < 2      # glibc's heap kept them


def test_steady_memory_is_asked_by_argument_or_environment():
    assert wanted(True, {}) and not wanted(False, {STEADY_MEMORY_VAR: "1"})
    assert wanted(None, {STEADY_MEMORY_VAR: "1"}) and not wanted(None, {})


def test_finite_check_sees_nan_and_inf_without_a_copy():
    for bad in (float("nan"), float("inf"), -float("inf")):
        t = torch.zeros(1000)
        t[700] = bad
        assert not bool(_finite(t))
    assert bool(_finite(torch.randn(1000)))
    assert bool(_finite(torch.empty(0))) and bool(_finite(torch.arange(5)))
