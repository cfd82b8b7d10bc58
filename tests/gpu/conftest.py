"""The GPU checks' harness: every test here is one check with a one-line result. A test
states what it measured with the `check` fixture; pass, failure or skip (with its reason)
comes from pytest. At the end the checks are listed one line each, and — when any ran —
written to the results file (tests/gpu/results.py) in $SCALETRAIN_GPU_CHECK_OUT, else in
runs/gpu-check-<time>/."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .machine import read as read_machine
from .results import Check, Results
from .target import TARGET

OUT_VARIABLE = "SCALETRAIN_GPU_CHECK_OUT"
_started = time.time()
_PHASES: dict[str, dict] = {}  # nodeid -> what its phases reported so far
_SESSION: dict = {}  # the results ("results") and the file written ("written")


@pytest.fixture(scope="session")
def target():
    return TARGET


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory) -> Path:
    """Where the checks' commands write their own output folders (kept with the results
    when the checks run for real, temporary otherwise)."""
    return results_folder() / "runs" if os.environ.get(OUT_VARIABLE) else tmp_path_factory.mktemp("gpu-check")


def results_folder() -> Path:
    if os.environ.get(OUT_VARIABLE):
        return Path(os.environ[OUT_VARIABLE])
    return Path("runs") / f"gpu-check-{time.strftime('%Y%m%d-%H%M%S', time.localtime(_started))}"


@pytest.fixture
def check(record_property):
    """check(line, **figures): this check's one-line result and the figures behind it."""
    def say(line: str, **figures) -> None:
        record_property("line", line)
        record_property("figures", figures)
    return say


def _name(nodeid: str) -> tuple[str, str]:
    """(group, check) from a node id: test_gpu_memory.py::test_x[ddp x2] -> ("memory", "ddp x2")."""
    path, _, test = nodeid.partition("::")
    group = Path(path).stem.removeprefix("test_gpu_")
    function, _, param = test.partition("[")
    return group, param[:-1] if param else function.removeprefix("test_").replace("_", " ")


def _message(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2].removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "failed")
    return first if len(first) <= 400 else first[:397] + "..."


def pytest_runtest_logreport(report):
    if "gpu" not in report.keywords:
        return
    seen = _PHASES.setdefault(report.nodeid, {"seconds": 0.0, "result": "passed", "line": "", "figures": {}})
    seen["seconds"] += report.duration
    props = dict(report.user_properties)
    seen["line"] = props.get("line", seen["line"])
    seen["figures"] = props.get("figures", seen["figures"])
    if report.failed or (report.skipped and seen["result"] == "passed"):
        measured = seen["line"]
        seen["result"] = "failed" if report.failed else "skipped"
        seen["line"] = _message(report) + (f" (measured: {measured})" if measured and report.failed else "")
    if report.when == "teardown":
        group, name = _name(report.nodeid)
        results = _results()
        results.checks.append(Check(group, name, seen["result"], seen["line"] or "passed", round(seen["seconds"], 1),
                                    seen["figures"]))
        del _PHASES[report.nodeid]
        if results.ran():  # after every check: a run stopped by a deadline still leaves its results
            results.write(results_folder())


def _results() -> Results:
    if "results" not in _SESSION:
        machine = read_machine() if TARGET.available else {}
        _SESSION["results"] = Results(TARGET.describe() if TARGET.available else TARGET.why_not, machine,
                                      started=_started)
    return _SESSION["results"]


def pytest_sessionfinish(session):
    results = _SESSION.get("results")
    if results is not None and results.ran():
        _SESSION["written"] = results.write(results_folder())


def pytest_terminal_summary(terminalreporter):
    results = _SESSION.get("results")
    if results is None or not results.ran():
        return
    terminalreporter.section("GPU checks: one line each")
    for c in results.ordered():
        terminalreporter.write_line(c.text())
    if "written" in _SESSION:
        terminalreporter.write_line(f"results: {_SESSION['written']} (and {_SESSION['written'].with_suffix('.json').name})")
