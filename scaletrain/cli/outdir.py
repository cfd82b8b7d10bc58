"""The run's output folder: checked before anything starts, created only once all is valid,
and owned by one run at a time.

Ownership is an flock on OUT/.scaletrain.lock, taken by the process that writes OUT (the
`scaletrain train` command, or rank 0 when torchrun, mpirun or srun started the ranks
directly). The kernel drops it when that process ends, however it ends, so a killed run
never blocks its own `--resume`; the file itself stays (removing it would let two runs
lock two different files of the same name).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Optional

from ..foundation.errors import UsageError


def default_out(strategy: str, nproc: int, root: Path = Path("runs")) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = root / f"{stamp}-{strategy}-{nproc}p"
    n = 1
    while candidate.exists():
        n += 1
        candidate = root / f"{stamp}-{strategy}-{nproc}p-{n}"
    return candidate


def check_out(out: Path) -> Path:
    """Refuses a folder that holds files already or cannot be written; creates nothing."""
    out = Path(out).expanduser().absolute()
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--out {out} is a file, not a folder; choose a folder path")
        refuse_if_held(out)
        if any(p.name != LOCK_FILE for p in out.iterdir()):
            raise UsageError(f"--out {out} already holds files; choose a new folder (or leave --out out)")
        if not os.access(out, os.W_OK | os.X_OK):
            raise UsageError(f"--out {out} cannot be written ({unwritable_because(out)}); choose a writable folder")
        return out
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--out {out} cannot be created: {parent} is a file, not a folder; choose another --out")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out} cannot be created in {parent} ({unwritable_because(parent)}); choose another "
                         "--out")
    return out


def unwritable_because(folder: Path) -> str:
    """Why this process cannot write into `folder`: a read-only file system, or whose it is."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "its file system is mounted read-only"
        info = folder.stat()
    except OSError as exc:
        return exc.strerror or str(exc)
    import pwd
    import stat

    def user(uid: int) -> str:
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return f"uid {uid}"
    return (f"permission denied: {stat.filemode(info.st_mode)}, owned by {user(info.st_uid)}; this process runs as "
            f"{user(os.geteuid())}")


LOCK_FILE = ".scaletrain.lock"


@contextlib.contextmanager
def hold_out(out: Path, may_hold_files: bool):
    """Creates OUT if needed and owns it until the block ends (or this process does). A
    folder another live run owns is refused in one line naming that run's pid and host;
    so is one that received another run's files since it was checked (unless
    `may_hold_files`: --resume auto). Nothing is written into a refused folder."""
    out = Path(out).expanduser().absolute()
    created = not out.exists()
    create_out(out)
    path = out / LOCK_FILE
    had_lock_file = path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        _give_up(None, path, out, created, had_lock_file)
        raise _unwritten(exc, path) from None
    if not _lock(fd, fcntl.LOCK_EX, tries=LOCK_TRIES):
        holder = _read_holder(fd)
        os.close(fd)
        raise _in_use(out, holder)
    others = [p for p in out.iterdir() if p.name != LOCK_FILE]
    if others and not may_hold_files:
        _give_up(fd, path, out, created, had_lock_file)
        raise UsageError(f"--out {out} already holds files; choose a new folder (or leave --out out)")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    except OSError as exc:  # a disk with no room at all: nothing is left behind
        _give_up(fd, path, out, created, had_lock_file)
        raise _unwritten(exc, path) from None
    try:
        yield out
    finally:
        os.close(fd)  # releases the lock


#: Tries, 0.05 s apart, before a lock counts as held: another command may be looking at it
#: (refuse_if_held) for a moment.
LOCK_TRIES = 5


def refuse_if_held(out: Path) -> None:
    """One line naming the run that owns `out` now, if one does; takes nothing."""
    path = Path(out) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # no lock file (a new folder, or a run from before locks), or unreadable: hold_out decides
    try:
        if _lock(fd, fcntl.LOCK_SH, tries=1):
            return
        raise _in_use(Path(out).expanduser().absolute(), _read_holder(fd))
    finally:
        os.close(fd)  # also releases the shared lock taken to look


def _lock(fd: int, kind: int, tries: int) -> bool:
    for attempt in range(tries):
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < tries:
                time.sleep(0.05)
    return False


def _in_use(out: Path, holder: str) -> UsageError:
    return UsageError(f"--out {out} is in use by another run ({holder}); wait for it to end or stop it, or choose "
                      "another --out")


def _read_holder(fd: int) -> str:
    try:
        pid, host = os.pread(fd, 512, 0).decode(errors="replace").split()[:2]
    except ValueError:  # the holder has not written its name yet (it locked a moment ago)
        return "its pid and host are not written yet"
    return f"pid {pid} on host {host}"


def _unwritten(exc: OSError, path: Path) -> UsageError:
    """The lock file could not be written: one line (a full disk says how full)."""
    from ..foundation.safe_files import disk_full, is_disk_full

    if is_disk_full(exc):
        return disk_full(f"the output folder's lock {path}", path.parent, started=False)
    return UsageError(f"--out {path.parent} cannot be written ({exc.strerror or exc}); choose another --out")


def _give_up(fd: Optional[int], path: Path, out: Path, created: bool, had_lock_file: bool) -> None:
    """Leaves the folder as it was found (still locked while the lock file goes)."""
    if not had_lock_file:
        path.unlink(missing_ok=True)
    if fd is not None:
        os.close(fd)
    if created:
        with contextlib.suppress(OSError):
            out.rmdir()


def discard_unstarted(out: Path, created: bool) -> None:
    """Removes `out` when this command created it and the run stopped before training began
    (a mistake found by the ranks: data that does not fit, a model that cannot be built):
    a refused run leaves nothing, as one refused before its ranks started. Training has
    begun once metrics.jsonl exists; call it while still holding `out`."""
    from ..train.report import METRICS_FILE

    out = Path(out).expanduser().absolute()
    if created and out.is_dir() and not (out / METRICS_FILE).exists():
        shutil.rmtree(out, ignore_errors=True)


def create_out(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from ..foundation.safe_files import disk_full, is_disk_full

        if is_disk_full(exc):
            raise disk_full(f"the output folder {out}", out.parent, started=False) from None
        raise UsageError(f"--out {out} cannot be created ({exc.strerror}); choose another --out") from None
    return out
