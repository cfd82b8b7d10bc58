import os
import time
from pathlib import Path

import pytest


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":  # zombies are gone already, only unreaped
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """Every test must leave no process of its own running."""
    yield
    deadline = time.time() + 5
    while (left := _descendants(os.getpid())) and time.time() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


@pytest.fixture(autouse=True)
def environment_restored():
    """What a test's in-process command puts into this process's environment for the processes
    it starts (the allocator's LD_PRELOAD, steady memory, a hang timeout) does not reach the
    next test's processes."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)
