"""The CPU memory allocator of the processes scaletrain starts.

torch takes a CPU tensor's memory from the C library's `malloc`. glibc's keeps what training
frees in its heap: a step frees and allocates the same large tensors again and again
(gradients, activations, FSDP's gathered blocks), and once its mmap threshold has risen (it
does after the first large block is freed) most of them stay in the heap, which grows with the
churn (FSDP × 2 on a 134 MB MLP: each process 1.9× one process's peak above its baseline).
mimalloc (Microsoft's, MIT) and tcmalloc (gperftools) keep freed memory in size classes and
page spans they hand out again or give back. mimalloc comes with scaletrain itself: pip
installs the `cmeel-mimalloc` wheel (Linux x86_64 and aarch64), which ships its shared library,
so every install has it; tcmalloc comes from the distribution (Debian: libtcmalloc-minimal4).
docs/memory.md has the measurements that order them (`PREFERENCE`).

An allocator is chosen when a process starts: the dynamic linker loads the library named in
`LD_PRELOAD` before the C library's own `malloc` is used. So the commands that start training
processes (train, launch, bench, plan) put it into the environment those processes inherit,
under every launcher; `scaletrain train` running its one process itself starts itself again
with it (cli/allocator_choice.py). Where none is installed, processes use glibc's, as before,
and `scaletrain doctor` and the run's summary say so and how to install one.

    auto       the first of PREFERENCE installed, else glibc (glibc with --steady-memory)
    mimalloc   mimalloc (pip: cmeel-mimalloc, a dependency of scaletrain; Debian: libmimalloc2.0)
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

NAMES = ("auto", "mimalloc", "tcmalloc", "jemalloc", "glibc")

#: What `auto` takes, the first of these installed: the order measured (docs/memory.md).
PREFERENCE = ("mimalloc", "tcmalloc")

#: The shared libraries of each allocator, in the order they are looked for.
LIBRARIES = {
    "mimalloc": ("libmimalloc.so.3", "libmimalloc.so.2", "libmimalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
}

#: Where the `cmeel-mimalloc` wheel puts its libraries, under a Python environment's site-packages.
WHEEL_LIBRARY_DIR = os.path.join("cmeel.prefix", "lib")

#: The pip package that brings mimalloc (a dependency of scaletrain where it has wheels).
MIMALLOC_PACKAGE = "cmeel-mimalloc"

#: How to install each, by the distribution's family (/etc/os-release's ID and ID_LIKE).
INSTALL = {
    "mimalloc": {family: f"pip install {MIMALLOC_PACKAGE}"
                 for family in ("debian", "rhel", "fedora", "suse", "arch", "alpine", "conda")},
    "tcmalloc": {"debian": "apt-get install libtcmalloc-minimal4", "rhel": "dnf install gperftools-libs",
                 "fedora": "dnf install gperftools-libs", "suse": "zypper install libtcmalloc4",
                 "arch": "pacman -S gperftools", "alpine": "apk add gperftools",
                 "conda": "conda install -c conda-forge gperftools"},
    "jemalloc": {"debian": "apt-get install libjemalloc2", "rhel": "dnf install jemalloc", "fedora": "dnf install jemalloc",
                 "suse": "zypper install libjemalloc2", "arch": "pacman -S jemalloc", "alpine": "apk add jemalloc",
                 "conda": "conda install -c conda-forge jemalloc"},
}

#: --allocator's help, for every command that starts training processes.
ALLOCATOR_HELP = (f"the CPU memory allocator of every process this command starts: auto (default: the first of "
                  f"{', '.join(PREFERENCE)} installed — pip installs mimalloc with scaletrain — else glibc's; glibc's "
                  f"with --steady-memory), {', '.join(n for n in NAMES if n != 'auto')}. `scaletrain doctor` says "
                  f"which runs and why; docs/memory.md has the measurements")

#: The allocator asked for, as every process a command starts inherits it.
ALLOCATOR_VAR = "SCALETRAIN_ALLOCATOR"

#: Why it was chosen, in words, for the run's summary (every process inherits it too).
REASON_VAR = "SCALETRAIN_ALLOCATOR_REASON"

#: tcmalloc prints a line for every allocation above this many bytes (1 GB by default): a
#: large model's tensors are that large, and those lines say nothing wrong.
_TCMALLOC_QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 50)}

#: Every variable the choice sets: what a launcher must pass to processes on other machines.
ALLOCATOR_VARS = ("LD_PRELOAD", ALLOCATOR_VAR, REASON_VAR, *_TCMALLOC_QUIET)

#: mimalloc gives memory freed back to the system this many milliseconds later (its
#: `mi_option_purge_delay`, number 15 of `mi_option_t` in mimalloc 2 and 3; 1,000 ms by default
#: in mimalloc 3): a process that frees and allocates the same tensors every step reuses them
#: meanwhile, at no cost. A run whose model state is sharded (FSDP) sets it to 0 at start
#: (`return_freed_at_once`): FSDP gathers whole blocks and frees them twice a step, and a freed
#: block held beside the next gathered one is what raises its peak (docs/memory.md measures
#: both). MIMALLOC_PURGE_DELAY in the environment, the user's, is left as it is.
_MI_OPTION_PURGE_DELAY = 15
PURGE_DELAY_VAR = "MIMALLOC_PURGE_DELAY"


def _site_dirs() -> list[str]:
    """The Python environment's package folders: a pip wheel's files are under one of them."""
    found = [sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")]
    try:
        import site

        found += [*site.getsitepackages(), site.getusersitepackages()]
    except (AttributeError, OSError):  # (a virtualenv's old site.py lacks them)
        pass
    found += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return [d for d in dict.fromkeys(found) if d]


def library_dirs() -> list[str]:
    """Where shared libraries are installed: pip wheels' (cmeel-mimalloc's) first, the
    distribution's folders (multiarch included), and the Python environment's own (conda
    installs them there)."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    found = [*(os.path.join(d, WHEEL_LIBRARY_DIR) for d in _site_dirs()),
             f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib64", "/lib64", "/usr/local/lib", "/usr/lib", "/lib",
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
    """The allocator the processes will run with: `auto` is the first of PREFERENCE installed
    (glibc with --steady-memory, which tunes glibc's own); one asked for by name must be installed."""
    if asked not in NAMES:
        raise UsageError(f"unknown allocator {asked!r}; choose one of {', '.join(NAMES)} ({arg('allocator')})")
    if steady_memory and asked in LIBRARIES:
        raise UsageError(f"{arg('steady_memory')} tunes glibc's allocator, not {asked}; give one of them "
                         f"({arg('allocator', 'glibc')} with {arg('steady_memory')}, or {arg('allocator', asked)} alone)")
    if asked == "auto":
        return "glibc" if steady_memory else next((name for name in _preferred() if find(name)), "glibc")
    if asked in LIBRARIES and find(asked) is None:
        raise UsageError(f"{arg('allocator', asked)}: {asked} is not installed here; install it "
                         f"({install_line(asked)}) or choose {arg('allocator', 'auto')}")
    return asked


def data_limit() -> Optional[int]:
    """The data-segment limit of this process (`ulimit -d`, which every process it starts
    inherits), in bytes; None where there is none."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _preferred() -> tuple:
    """PREFERENCE, without mimalloc under a data-segment limit, which counts the memory mimalloc
    maps ahead of use (its arenas): after importing torch a process's data segment is 397 MB
    under mimalloc against 222 MB under glibc's, and a plan's probe limited to 480 MB failed
    to make its process group instead of measuring up to the limit."""
    return tuple(n for n in PREFERENCE if not (n == "mimalloc" and data_limit() is not None))


def reason(asked: str, steady_memory: bool, chosen: str) -> str:
    """Why `chosen` runs, in a few words (the run's summary, `scaletrain doctor`)."""
    if asked != "auto":
        return "asked for (--allocator)"
    if steady_memory:
        return "--steady-memory tunes glibc's"
    limited = "mimalloc" not in _preferred() and find("mimalloc")
    if limited:
        return (f"the default under `ulimit -d` ({data_limit() / 1e6:,.0f} MB), which counts the memory mimalloc "
                "maps ahead of use" + ("" if chosen == "glibc" else f": {chosen}, from {find(chosen)}"))
    if chosen == "glibc":
        return (f"the default where none of {', '.join(PREFERENCE)} is installed (no {MIMALLOC_PACKAGE} wheel for "
                f"this platform?): `{install_line(PREFERENCE[0])}` brings {PREFERENCE[0]}")
    path = find(chosen) or ""
    source = f"the {MIMALLOC_PACKAGE} package" if WHEEL_LIBRARY_DIR in path else path
    skipped = PREFERENCE[:PREFERENCE.index(chosen)] if chosen in PREFERENCE else ()
    return f"the default, from {source}" + (f" ({', '.join(skipped)} not installed)" if skipped else "")


def _without_allocators(preload: str) -> list[str]:
    """LD_PRELOAD's entries other than an allocator's (so that one choice replaces another)."""
    names = {lib.split(".so")[0] for libs in LIBRARIES.values() for lib in libs}
    return [p for p in preload.replace(":", " ").split() if os.path.basename(p).split(".so")[0] not in names]


def environment(name: str, environ: Mapping[str, str] = os.environ,
                why: Optional[str] = None) -> dict[str, Optional[str]]:
    """The variables that make processes started with `environ` run allocator `name` (None:
    the variable is removed), and know `why`."""
    others = _without_allocators(environ.get("LD_PRELOAD", ""))
    path = find(name) if name in LIBRARIES else None
    preload = " ".join([*([path] if path else []), *others]) or None
    found = {"LD_PRELOAD": preload, ALLOCATOR_VAR: name, REASON_VAR: why}
    if name == "tcmalloc":
        found.update({k: environ.get(k, v) for k, v in _TCMALLOC_QUIET.items()})
    return found


def apply(name: str, environ: MutableMapping[str, str] = os.environ, why: Optional[str] = None) -> None:
    """Puts `environment(name)` into `environ` (this process's, which every process it starts inherits)."""
    for key, value in environment(name, environ, why).items():
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
    if name == "mimalloc" and hasattr(libc, "mi_collect"):
        libc.mi_collect(ctypes.c_bool(True))  # force: every thread's free pages purged
    elif name == "tcmalloc" and hasattr(libc, "MallocExtension_ReleaseFreeMemory"):
        libc.MallocExtension_ReleaseFreeMemory()
    elif name == "jemalloc" and hasattr(libc, "mallctl"):
        # MALLCTL_ARENAS_ALL (4096): purge every arena's unused dirty pages.
        libc.mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))
    elif name == "glibc" and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(ctypes.c_size_t(0))


def purge_delay(milliseconds: Optional[int] = None) -> Optional[int]:
    """mimalloc's purge delay in this process (set to `milliseconds` when given); None where
    mimalloc does not run here, or where the user set it (PURGE_DELAY_VAR)."""
    import ctypes

    if running() != "mimalloc" or PURGE_DELAY_VAR in os.environ:
        return None
    try:
        libc = ctypes.CDLL(None)
        get, put = libc.mi_option_get, libc.mi_option_set
    except (OSError, AttributeError):
        return None
    get.argtypes, get.restype, put.argtypes = (ctypes.c_int,), ctypes.c_long, (ctypes.c_int, ctypes.c_long)
    before = int(get(_MI_OPTION_PURGE_DELAY))
    if milliseconds is not None:
        put(_MI_OPTION_PURGE_DELAY, milliseconds)
    return before


def return_freed_at_once() -> Optional[int]:
    """Freed memory back to the system at once, from here on (mimalloc; see _MI_OPTION_PURGE_DELAY).
    Returns the delay before, to restore with purge_delay(); None where it does not apply."""
    return purge_delay(0)


def described(name: Optional[str] = None) -> str:
    """What summary.json records: the allocator running here, with glibc's tuning when steady,
    and mimalloc's purge delay where it is not its own default."""
    from .steady import wanted

    name = name or running()
    if name == "mimalloc":
        delay = purge_delay()
        return "mimalloc (freed memory returned at once)" if delay == 0 else name
    return "glibc (steady memory)" if name == "glibc" and wanted(None) else name


def described_reason(environ: Mapping[str, str] = os.environ, name: Optional[str] = None) -> str:
    """Why this process runs the allocator it runs (summary.json's `allocator_reason`): the
    command's reason where the process runs what the command chose."""
    name = name or running()
    chosen = environ.get(ALLOCATOR_VAR)
    if chosen is None:
        return "not chosen by a scaletrain command (the process's own)"
    if chosen != name:
        return f"{chosen} was chosen but did not load (LD_PRELOAD {environ.get('LD_PRELOAD') or 'empty'})"
    return environ.get(REASON_VAR) or "chosen by the command"


def pass_on(asked: str = "auto", steady_memory: bool = False) -> str:
    """Every process the command starts inherits the allocator asked for through its
    environment (any launcher: spawn, torchrun, mpirun's -x, srun's exported environment).
    Returns the allocator they run with."""
    chosen = resolve(asked, steady_memory)
    apply(chosen, why=reason(asked, steady_memory, chosen))
    return chosen
