"""The machine-level tools with NCCL: `scaletrain doctor --backend nccl` (its all-reduce
self-test on the GPUs) and `scaletrain comm --backend nccl` (every collective's time and bus
bandwidth between two GPUs)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import scaletrain

from .target import TARGET

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not TARGET.available, reason=TARGET.skip_reason)]

SIZES = "1K,1M,64M"


def test_doctor(target, check):
    done = scaletrain("doctor", "--backend", target.backend, "--json", timeout=180)
    report = json.loads(done.stdout)
    findings = report["findings"]
    problems = [f["what"] for f in findings if f["level"] == "PROBLEM"]
    self_test = [f["what"] for f in findings if "all-reduce" in f["what"]]
    notes = [f["what"] for f in findings if f["level"] == "note" and "GPU" in f["what"]]
    check(f"{'; '.join(self_test) or 'no self-test'}{'; ' + '; '.join(notes) if notes else ''}", findings=findings)
    assert done.returncode == 0 and report["ok"], f"doctor found problems: {'; '.join(problems)}"
    assert any("correct" in line for line in self_test), self_test


@pytest.mark.timeout(400)
def test_comm(target, check):
    if why := target.lacks(2, "NCCL takes one GPU per process and a collective needs 2 processes"):
        pytest.skip(why)
    done = scaletrain("comm", "--nproc", "2", "--sizes", SIZES, *target.flags(), "--json", timeout=300)
    assert done.returncode == 0, f"scaletrain comm failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)
    assert report["backend"] == target.backend and str(report["device"]).startswith(target.device), report
    by_op: dict[str, list[dict]] = {}
    for r in report["results"]:
        by_op.setdefault(r["op"], []).append(r)
    assert by_op, "scaletrain comm measured nothing"
    parts = []
    for op, rows in by_op.items():
        small, large = min(rows, key=lambda r: r["bytes"]), max(rows, key=lambda r: r["bytes"])
        assert large["busbw_gbps"] > 0 and small["seconds"] > 0, (op, rows)
        parts.append(f"{op} {small['seconds'] * 1e6:,.0f} µs at {small['bytes'] // 1024} KiB, "
                     f"{large['busbw_gbps']:,.1f} GB/s bus at {large['bytes'] >> 20} MiB")
    check("; ".join(parts), results=report["results"])
