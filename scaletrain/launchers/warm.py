"""Warm interpreters: the ranks of `scaletrain train` start while the command still reads
its flags.

Most of a rank's start-up is importing torch (about a second), and most of the command's
own is too: it needs torch for the strategies its flags name and for the checks it makes
before anything starts. One after the other, one core idles while the command imports. So
the command starts the Python processes that will be its ranks first, as warm
interpreters: each imports torch and waits on a pipe, holding no rank, no configuration
and no file. Once everything is checked and the launch planned, the spawn launcher hands
each the exact command of its rank in the plan (argv and environment, as `--dry-run`
shows them) and it runs it, as a freshly started process would, torch already imported.
Interpreters not needed (another launcher, another number of processes, a mistake in the
flags) are ended before the command returns; one whose command dies reads the end of the
pipe and leaves.

    python -m scaletrain.launchers.warm     (then one JSON line: {"argv": [...], "env": {...}})

Only scaletrain's own ranks are started warm: a user's program (`scaletrain launch`) gets a
process started for it, as under torchrun, with its environment in place before torch is
imported.
"""

from __future__ import annotations

import os
import signal


def _quiet(*_args) -> None:
    os._exit(0)


if __name__ == "__main__":
    # Waiting is not running: Ctrl-C, SIGTERM or SIGHUP end this process at once, and in
    # silence (the command says what happened).
    for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(_signum) != signal.SIG_IGN:
            signal.signal(_signum, _quiet)

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from typing import Optional  # noqa: E402

MODULE = "scaletrain.launchers.warm"

_pool: list = []
_preload: list = []  # the LD_PRELOAD the interpreters started with (the allocator they run: memory/allocator.py)


def warm_up(count: int) -> None:
    """Starts `count` warm interpreters (none when some are already there)."""
    if _pool or count < 1:
        return
    _preload[:] = [os.environ.get("LD_PRELOAD")]
    for _ in range(count):
        try:
            _pool.append(subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE))
        except OSError:
            return


def take(argv, env: dict) -> Optional[subprocess.Popen]:
    """A warm interpreter now running `argv` (a Python command of this interpreter) with
    `env` as its whole environment; None when none is left or `argv` is another program."""
    argv = list(argv)
    if not _pool or not argv or argv[0] != sys.executable or argv[1:2] != ["-m"]:
        return None
    if [env.get("LD_PRELOAD")] != _preload:  # started with another allocator than this rank's
        return None
    proc = _pool.pop(0)
    try:
        proc.stdin.write((json.dumps({"argv": argv[1:], "env": dict(env)}) + "\n").encode())
        proc.stdin.close()
    except OSError:  # it died meanwhile
        proc.wait()
        return None
    return proc


def discard() -> None:
    """Ends the interpreters nobody took."""
    while _pool:
        proc = _pool.pop()
        try:
            proc.kill()
        except OSError:
            pass
        proc.wait()


#: What a rank of `scaletrain train` imports first: torch, the trainer, then torch's compiler
#: front end (torch._dynamo: any optimizer's construction imports it, about as long as torch
#: itself, so every rank pays it before its first step: here it is paid while the command
#: still reads its flags). None reads the environment when imported, which is not the rank's
#: yet. (The modules it runs as `__main__` are left to run then: runpy warns of one already
#: imported.) Measured (benchmarks/startup_timeline.py, docs/performance.md): the first step
#: 0.1 s sooner than with the compiler imported after the command came.
PRELOAD = ("torch", "scaletrain.train.loop", "torch._dynamo")


def _order_ready() -> bool:
    import select

    return bool(select.select([sys.stdin], [], [], 0)[0])


def main() -> None:
    import importlib

    from ..process.startup_timeline import mark

    for name in PRELOAD:  # until the command is ready; whatever is left is imported when needed
        importlib.import_module(name)
        mark(f"rank: warm interpreter imported {name}")
        if _order_ready():
            break
    line = sys.stdin.buffer.readline()
    if not line:  # the command ended without needing this process
        os._exit(0)
    order = json.loads(line)
    from ..process.startup_timeline import TIMELINE_VAR, mark

    if order["env"].get(TIMELINE_VAR):
        os.environ[TIMELINE_VAR] = order["env"][TIMELINE_VAR]
        os.environ["RANK"] = order["env"].get("RANK", "")
        mark("rank: warm interpreter given its rank")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the pipe is done; a rank reads nothing from its command
    os.close(devnull)
    sys.stdin = open(0, closefd=False)
    os.environ.clear()
    os.environ.update(order["env"])
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is _quiet:
            signal.signal(signum, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is _quiet:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    import runpy

    argv = order["argv"]  # ["-m", module, args...]
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
