"""Helpers for launch tests: run a command in its own session and report what it left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .helpers import REPO, test_env

EXAMPLE = REPO / "examples" / "plain_ddp.py"
FAIL_SCRIPT = REPO / "tests" / "scripts" / "fail_on_rank.py"
TOKEN_VAR = "SCALETRAIN_TEST_TOKEN"


def marked(token: str) -> list[int]:
    """Live processes whose environment carries `token`: everything a command started,
    whatever session, parent or network namespace it ended up in."""
    found = []
    needle = f"{TOKEN_VAR}={token}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                stat = (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()
                if stat[0] != "Z":
                    found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def kill_marked(token: str) -> None:
    for pid in marked(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_marked(argv: list[str], env: dict | None = None, cwd: Path = REPO) -> tuple[subprocess.Popen, str]:
    token = uuid.uuid4().hex
    env = dict(env if env is not None else test_env())
    env[TOKEN_VAR] = token
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    return proc, token


def finish_marked(proc: subprocess.Popen, token: str, timeout: float,
                  grace: float = 5.0) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Waits for the command; then waits up to `grace` seconds for everything it started to
    go, and returns (result, pids still there), killing those."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_marked(token)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout}s: {proc.args}\nstdout:\n{out}\nstderr:\n{err}") from None
    deadline = time.monotonic() + grace
    while (left := marked(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    kill_marked(token)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), left


def run_session(argv: list[str], timeout: float, env: dict | None = None,
                cwd: Path = REPO) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Runs argv; returns (result, pids of anything it left running)."""
    proc, token = start_marked(argv, env, cwd)
    return finish_marked(proc, token, timeout)


def launch_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "scaletrain", "launch", *args]


def first_user_exception(stderr: str, script_name: str) -> str:
    """The exception line that ends the first traceback through the user's script."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if f'{script_name}", line' in line)
    return next(line.strip() for line in lines[start:] if line.strip().split(":")[0].endswith("Error"))
