"""Steady memory on a CPU: freed tensors go back to the system, so that a process's resident
memory follows what it holds.

glibc's malloc serves an allocation from its heap unless it is larger than the mmap
threshold, and that threshold rises (up to 32 MB) each time a larger mapped block is freed.
Training frees and allocates the same large tensors every step (gradients, FSDP's gathered
blocks, activations), so after the first steps most of them land in the heap, which keeps
what is freed: resident memory grows with the churn and differs by 10–20% from one run of
the same job to the next (one run of a 134 MB MLP peaked at 1,001 MB, the next at 1,078 MB;
FSDP over 16 blocks of 17 MB grew to 2.5 GB per process where it held 0.9 GB). With the
threshold fixed, every tensor of at least `THRESHOLD_BYTES` is mapped on its own and returned
when freed: the peak is what the process held, run after run, and what the plan predicts.
The price is fresh pages zeroed by the kernel at each such allocation (8% of a step for a
large MLP, about 40% for the CNN and the GPT at batch 256; more for FSDP with many mid-sized
blocks, which gathers every block twice a step).

`SCALETRAIN_STEADY_MEMORY=1` in a rank's environment (what `--steady-memory` sets for every
process a command starts) or `scaletrain.init(steady_memory=True)` turns it on. A GPU's caching
allocator is not glibc's: there it changes nothing that the peak counts.
"""

from __future__ import annotations

import ctypes
import os
from typing import Mapping, Optional

#: The environment variable the launchers pass to every rank.
STEADY_MEMORY_VAR = "SCALETRAIN_STEADY_MEMORY"

#: --steady-memory's help, for every command that starts training processes.
STEADY_MEMORY_HELP = ("on a CPU, give freed tensors of 2 MB and more back to the system at once (glibc's mmap "
                      "threshold fixed), so that each process's resident memory is what it holds and what "
                      "`scaletrain plan` predicts, run after run; costs some speed (fresh pages for large tensors). "
                      "Give it to plan, bench and train alike when memory is what limits you")


def pass_on(steady: bool) -> None:
    """Every process the command starts inherits the choice through its environment (any
    launcher: spawn, torchrun, mpirun's -x, srun's exported environment)."""
    if steady:
        os.environ[STEADY_MEMORY_VAR] = "1"

#: Tensors from this size up are mapped on their own; smaller ones, the many small tensors of a
#: step, stay in the heap, where they are cheap. 2 MB, not 4: a pipeline stage's activations
#: of one micro-batch are often just under 4 MB, and in the heap they left a GPT's last stage
#: 77 MB above its tensors (at 2 MB: within 3%). One process of the 134 MB MLP and of the GPT
#: ran within 3% as fast at 2 MB as at 4 MB; the CNN, whose activations are 2–4 MB, 18% slower.
THRESHOLD_BYTES = 2 << 20

#: mallopt's parameter number for the mmap threshold (malloc.h's M_MMAP_THRESHOLD).
_M_MMAP_THRESHOLD = -3


def wanted(asked: Optional[bool], environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process should keep its memory steady: as asked, else as its environment says."""
    if asked is not None:
        return asked
    return environ.get(STEADY_MEMORY_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def make_steady() -> bool:
    """Fix glibc's mmap threshold at THRESHOLD_BYTES in this process; False where the C library
    is not glibc (musl, macOS), whose allocators this does not apply to."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD_BYTES))
