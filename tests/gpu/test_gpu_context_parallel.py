"""Context parallel's attention on one device: the kernels scaletrain's ring computes its blocks
with (blocks merged by their log-sum-exps, backward from the merged output) against torch's
attention, and torch's own context-parallel attention on a mesh of one GPU (CUDA only). The
rings across processes — two sharing one GPU over Gloo, or a GPU each over NCCL — are the
`cp` rows of test_gpu_strategies.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import run

from .target import TARGET

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not TARGET.available, reason=TARGET.skip_reason)]

WORKER = Path(__file__).resolve().parent / "workers" / "cp_attention.py"
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}  # one kernel's round-off against another's


@pytest.fixture(scope="module")
def lines(target) -> dict:
    done = run([sys.executable, str(WORKER), "--device", target.device], timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict = {"KERNEL": []}
    for line in done.stdout.splitlines():
        kind, _, payload = line.partition(" ")
        if kind == "KERNEL":
            found["KERNEL"].append(json.loads(payload))
        elif kind == "TORCH":
            found["TORCH"] = json.loads(payload)
    return found


@pytest.mark.timeout(300)
def test_cp_ring_kernels_match_torch_attention(lines, check):
    rows = lines["KERNEL"]
    assert {r["dtype"] for r in rows} == {"float32", "bfloat16"}, rows
    check("; ".join(f"{r['dtype']} on {r['device']}: worst |Δ| {max(r['errors'].values()):.1e}" for r in rows),
          rows=rows)
    for r in rows:
        assert max(r["errors"].values()) < TOLERANCE[r["dtype"]], r


@pytest.mark.timeout(300)
def test_cp_torch_attention_on_one_gpu(lines, check):
    result = lines["TORCH"]
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert "error" not in result, result["error"]
    check(f"torch {result['torch']}: torch's context-parallel attention on a mesh of one GPU, bf16, worst |Δ| "
          f"{max(result['errors'].values()):.1e} against torch's attention", **result)
    assert max(result["errors"].values()) < TOLERANCE["bfloat16"], result
