"""Running commands from tests: a hard timeout on everything, and nothing left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_env(**extra: str) -> dict:
    """The environment for a child: this checkout first on the path, no launcher variables
    inherited from whatever runs the tests (a Slurm job, torchrun)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "PMI_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "GROUP_RANK", "GROUP_WORLD_SIZE", "SCALETRAIN_LAUNCHER")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


test_env.__test__ = False  # a helper, not a test, even when imported into a test module


def run(argv: list[str], timeout: float, env: dict | None = None, cwd: Path | None = None,
        check: bool = False) -> subprocess.CompletedProcess:
    """Runs argv in its own session; on timeout kills the whole session (every process it
    started) and fails the test with what it printed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env if env is not None else test_env(), cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout}s: {argv}\nstdout:\n{out}\nstderr:\n{err}") from None
    finally:
        try:  # anything the command left running in its session goes too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {argv}\nstdout:\n{out}\nstderr:\n{err}")
    return result


def scaletrain(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "scaletrain", *args], timeout=timeout, **kwargs)


def in_process(capsys, *args: str) -> tuple[int, str, str]:
    """`scaletrain ARGS` in this process, for what the command refuses before starting anything
    (a subprocess would spend its seconds importing torch): the exit status (argparse's own
    refusals exit through SystemExit), stdout and stderr."""
    from scaletrain.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def torchrun(script: str | Path, *args: str, nproc: int = 2, timeout: float = 120, standalone: bool = False,
             **kwargs):
    """torchrun of `script` on this machine. `standalone`: torchrun's agent binds a port of the
    system's choosing itself (--standalone) instead of the free port found here, which another
    socket can take in the seconds before torchrun binds it (torch's EADDRINUSE at start-up)."""
    where = ["--standalone"] if standalone else ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    return run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), *where, str(script),
                *args], timeout=timeout, **kwargs)
