"""The CPU memory allocator of the processes scaletrain starts.

torch takes a CPU tensor's memory from the C library's `malloc`. glibc's keeps what training
frees in its heap: a step frees and allocates the same large tensors again and again
(gradients, activations, FSDP's gathered blocks), and once its mmap threshold has risen (it
does after the first large block is freed) most of them stay in the heap, which grows with the
churn (the synthetic MLP's FSDP process of two: 660 MB above its baseline under glibc's, 230
under tcmalloc). tcmalloc (gperftools) keeps freed memory in size classes and page spans it
hands out again: on every built-in workload, the byte-level GPT and a 134 MB MLP, under single,
ddp × 2 and fsdp × 2, it ran at least as fast as glibc's in 18 of 18 (median 1.07×, the
closest 1.00× over 7 repetitions), with peaks above the baseline from 0.35× to 1.75× glibc's (median 0.98×;
docs/memory.md has the table). Intel's CPU launcher for PyTorch preloads tcmalloc or jemalloc by default for the same reason.

An allocator is chosen when a process starts: the dynamic linker loads the library named in
`LD_PRELOAD` before the C library's own `malloc` is used. So the commands that start training
processes (train, launch, bench, plan, comm) put it into the environment those processes
inherit, under every launcher; `scaletrain train` running its one process itself starts itself
again with it (cli/allocator_choice.py). Where the library is not installed, processes use
glibc's, as before, and `scaletrain doctor` says how to install it.

    auto       tcmalloc where installed, else glibc (glibc with --steady-memory)
    tcmalloc   gperftools' tcmalloc (Debian: libtcmalloc-minimal4)
    jemalloc   jemalloc (Debian: libjemalloc2)
    glibc      the C library's own

No torch here: the command line decides before torch is imported.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Mapping, MutableMapping, Optional

from ..foundation.errors import UsageError, arg

NAMES = ("auto", "tcmalloc", "jemalloc", "glibc")

#: The allocator `auto` takes where it is installed: the fastest and leanest measured here.
BEST = "tcmalloc"

#: The shared libraries of each allocator, in the order they are looked for.
LIBRARIES = {
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
}

#: How to install each, by the distribution's family (/etc/os-release's ID and ID_LIKE).
INSTALL = {
    "tcmalloc": {"debian": "apt-get install libtcmalloc-minimal4", "rhel": "dnf install gperftools-libs",
                 "fedora": "dnf install gperftools-libs", "suse": "zypper install libtcmalloc4",
                 "arch": "pacman -S gperftools", "alpine": "apk add gperftools",
                 "conda": "conda install -c conda-forge gperftools"},
    "jemalloc": {"debian": "apt-get install libjemalloc2", "rhel": "dnf install jemalloc", "fedora": "dnf install jemalloc",
                 "suse": "zypper install libjemalloc2", "arch": "pacman -S jemalloc", "alpine": "apk add jemalloc",
                 "conda": "conda install -c conda-forge jemalloc"},
}

#: --allocator's help, for every command that starts training processes.
ALLOCATOR_HELP = (f"the CPU memory allocator of every process this command starts: auto (default: {BEST} where "
                  f"installed, else glibc's; glibc's with --steady-memory), tcmalloc, jemalloc or glibc. {BEST} ran "
                  f"faster than glibc's on the workloads measured (docs/memory.md); "
                  f"`scaletrain doctor` says how to install it")

#: The allocator asked for, as every process a command starts inherits it.
ALLOCATOR_VAR = "SCALETRAIN_ALLOCATOR"

#: tcmalloc prints a line for every allocation above this many bytes (1 GB by default): a
#: large model's tensors are that large, and those lines say nothing wrong.
_TCMALLOC_QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 50)}

#: Every variable the choice sets: what a launcher must pass to processes on other machines.
ALLOCATOR_VARS = ("LD_PRELOAD", ALLOCATOR_VAR, *_TCMALLOC_QUIET)


def library_dirs() -> list[str]:
    """Where shared libraries are installed: the distribution's folders (multiarch included),
    and the Python environment's own (conda installs them there)."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    found = [f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib64", "/lib64", "/usr/local/lib", "/usr/lib", "/lib",
             os.path.join(sys.prefix, "lib")]
    return [d for d in dict.fromkeys(found) if d and os.path.isdir(d)]


def find(name: str) -> Optional[str]:
    """The path of allocator `name`'s shared library, or None where it is not installed."""
    for directory in library_dirs():
        for library in LIBRARIES.get(name, ()):
            path = os.path.join(directory, library)
            if os.path.exists(path):
                return path
    return None


def install_line(name: str, os_release: str = "/etc/os-release") -> str:
    """The one command that installs allocator `name` on this machine's distribution."""
    lines = INSTALL[name]
    if os.environ.get("CONDA_PREFIX"):
        return lines["conda"]
    try:
        facts = dict(line.split("=", 1) for line in Path(os_release).read_text().splitlines() if "=" in line)
    except OSError:
        facts = {}
    families = [facts.get("ID", "").strip('"'), *facts.get("ID_LIKE", "").strip('"').split()]
    return next((lines[f] for f in families if f in lines), lines["debian"])


def resolve(asked: str = "auto", steady_memory: bool = False) -> str:
    """The allocator the processes will run with: `auto` is the best installed (glibc with
    --steady-memory, which tunes glibc's own); one asked for by name must be installed."""
    if asked not in NAMES:
        raise UsageError(f"unknown allocator {asked!r}; choose one of {', '.join(NAMES)} ({arg('allocator')})")
    if steady_memory and asked in LIBRARIES:
        raise UsageError(f"{arg('steady_memory')} tunes glibc's allocator, not {asked}; give one of them "
                         f"({arg('allocator', 'glibc')} with {arg('steady_memory')}, or {arg('allocator', asked)} alone)")
    if asked == "auto":
        return "glibc" if steady_memory or find(BEST) is None else BEST
    if asked in LIBRARIES and find(asked) is None:
        raise UsageError(f"{arg('allocator', asked)}: {asked} is not installed here; install it "
                         f"({install_line(asked)}) or choose {arg('allocator', 'auto')}")
    return asked


def _without_allocators(preload: str) -> list[str]:
    """LD_PRELOAD's entries other than an allocator's (so that one choice replaces another)."""
    names = {lib.split(".so")[0] for libs in LIBRARIES.values() for lib in libs}
    return [p for p in preload.replace(":", " ").split() if os.path.basename(p).split(".so")[0] not in names]


def environment(name: str, environ: Mapping[str, str] = os.environ) -> dict[str, Optional[str]]:
    """The variables that make processes started with `environ` run allocator `name` (None:
    the variable is removed)."""
    others = _without_allocators(environ.get("LD_PRELOAD", ""))
    path = find(name) if name in LIBRARIES else None
    preload = " ".join([*([path] if path else []), *others]) or None
    found = {"LD_PRELOAD": preload, ALLOCATOR_VAR: name}
    if name == "tcmalloc":
        found.update({k: environ.get(k, v) for k, v in _TCMALLOC_QUIET.items()})
    return found


def apply(name: str, environ: MutableMapping[str, str] = os.environ) -> None:
    """Puts `environment(name)` into `environ` (this process's, which every process it starts inherits)."""
    for key, value in environment(name, environ).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value


def running(maps: str = "/proc/self/maps") -> str:
    """The allocator this process runs with: the library mapped into it, else glibc's."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return "unknown"
    for name, libraries in LIBRARIES.items():
        stems = {lib.split(".so")[0] for lib in libraries}
        if any(f"/{stem}.so" in text for stem in stems):
            return name
    return "glibc"


def release_free_memory() -> None:
    """Hand what the running allocator holds free back to the system, so that resident memory
    is what the process uses: after an evaluation, whose batches (larger than training's) leave
    free memory in the allocator's caches that would otherwise count as training's peak."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return
    name = running()
    if name == "tcmalloc" and hasattr(libc, "MallocExtension_ReleaseFreeMemory"):
        libc.MallocExtension_ReleaseFreeMemory()
    elif name == "jemalloc" and hasattr(libc, "mallctl"):
        # MALLCTL_ARENAS_ALL (4096): purge every arena's unused dirty pages.
        libc.mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))
    elif name == "glibc" and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(ctypes.c_size_t(0))


def described(name: Optional[str] = None) -> str:
    """What summary.json records: the allocator running here, with glibc's tuning when steady."""
    from .steady import wanted

    name = name or running()
    return "glibc (steady memory)" if name == "glibc" and wanted(None) else name



def pass_on(asked: str = "auto", steady_memory: bool = False) -> str:
    """Every process the command starts inherits the allocator asked for through its
    environment (any launcher: spawn, torchrun, mpirun's -x, srun's exported environment).
    Returns the allocator they run with."""
    chosen = resolve(asked, steady_memory)
    apply(chosen)
    return chosen
