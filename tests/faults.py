"""Fault injection for tests: find a job's worker processes, wait for its checkpoints, and
run a command in the background while the test acts on it (nothing left behind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from tests.conftest import _descendants
from tests.helpers import test_env


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def spawned_workers(pid: int) -> list[int]:
    """The ranks the spawn launcher started under `pid`: its rank runners (a rank of
    `scaletrain train` runs in a warm interpreter started for it), rank 0 first."""
    return sorted(p for p in _descendants(pid)
                  if "scaletrain.launchers.rank" in cmdline(p) or "scaletrain.launchers.warm" in cmdline(p))


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the command ended (status {proc.returncode}) before {what}\n{out}\n{err}")
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Background:
    """`with Background(argv) as job:` runs argv in its own session; on leaving, whatever
    is still running in that session is killed (stopped processes too)."""

    def __init__(self, argv: list[str], env: dict | None = None, cwd: Path | None = None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env if env is not None else test_env(), cwd=cwd, start_new_session=True)

    def finish(self, timeout: float) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"timed out after {timeout}s\nstdout:\n{out}\nstderr:\n{err}") from None
        return self.proc.returncode, out, err

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "Background":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
        if self.proc.poll() is None or self.proc.stdout and not self.proc.stdout.closed:
            self.proc.communicate()


def scaletrain_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "scaletrain", *args]


def final_model(out: Path) -> dict:
    from scaletrain.checkpoint import latest_checkpoint, load_state

    folder = latest_checkpoint(out / "checkpoints")
    assert folder is not None, f"no checkpoint in {out}"
    return load_state(folder / "state.pt")["model"]


def assert_same_tensors(a: dict, b: dict, atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if atol == 0.0:
            assert torch.equal(a[key], b[key]), f"{key} differs (max {(a[key] - b[key]).abs().max().item():.3g})"
        else:
            torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0, msg=lambda m: f"{key}: {m}")
