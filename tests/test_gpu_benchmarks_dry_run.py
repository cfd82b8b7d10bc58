"""The GPU proof (scripts/gpu-proof.sh) through its CPU dry run: every part — the carried
wheels installed offline, gpu-check, the calibration, the step check, the comparison with
torchtitan (eager and compiled), float8 — runs on tiny shapes and is a row of the table,
which names the machine and torch's version; the table is written part by part. And the
step check's rows: a run that fails is a row, not a KeyError, and memory is compared like
with like (allocated with allocated, reserved with reserved)."""

from __future__ import annotations

import json
import sys

from tests.helpers import REPO, run

PARTS = ("wheels", "gpu-check", "calibration", "step-check", "torchtitan-eager", "torchtitan-compiled", "float8",
         "gpu-check-rest")


def test_the_gpu_proof_dry_run_writes_every_part_as_a_row(tmp_path):
    table = tmp_path / "gpu-results.md"
    done = run(["bash", str(REPO / "scripts" / "gpu-proof.sh"), "--dry-run", "--out", str(tmp_path / "out"),
                "--table", str(table)], timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "gpu-proof.json").read_text())["rows"]
    assert {row["part"] for row in rows} == set(PARTS), rows
    assert not [row for row in rows if row["result"] in ("FAIL", "not run")], rows
    text = table.read_text()
    assert "- GPU: no GPU (CPU dry run)" in text and "- torch 2." in text and "torchtitan 0.2.2" in text
    assert all(f"| {part} |" in text for part in PARTS)
    # the parts' own results: the step check trained the grouped-query Llama, torchtitan's side was
    # configured from the carried wheels, bf16 trained and float8 was refused in one line
    step = json.loads((tmp_path / "out" / "step-check" / "gpu_step_check.json").read_text())
    assert len(step["rows"]) == 1 and "step_seconds" in step["rows"][0] and "GQA" in step["model"]
    sides = json.loads((tmp_path / "out" / "torchtitan-eager" / "gpu_vs_torchtitan.json").read_text())["results"]
    assert sides["scaletrain"]["parameters_match"] and sides["torchtitan"]["parameters_match"], sides
    float8 = json.loads((tmp_path / "out" / "float8" / "gpu_float8_check.json").read_text())["runs"]
    assert len(float8["bf16"]["losses"]) >= 6 and "but this run is on the cpu" in float8["float8"]["refused"]


def test_a_failed_step_check_run_is_a_row_and_memory_compares_like_with_like():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_step_check

    from scaletrain.hardware import load_profile
    from scaletrain.workloads.model_shapes import shape_from_config

    shape = shape_from_config(gpu_step_check.TINY, "tiny")
    predicted = gpu_step_check.predict(shape, load_profile("h200"), 32, 1, "full")
    failed = gpu_step_check.compare(32, 1, "full", {"failure": "AssertionError: boom"}, predicted)
    measured = {"step_seconds": 0.5, "peak_memory_bytes": 2 ** 30, "peak_reserved_bytes": 2 ** 31}
    row = gpu_step_check.compare(32, 1, "none", measured, predicted)
    allocated = predicted.memory_bytes - predicted.memory.get("allocator", 0.0)
    assert row["memory_error"] == allocated / 2 ** 30 - 1
    assert row["reserved_error"] == predicted.memory_bytes / 2 ** 31 - 1
    table = gpu_step_check.markdown({"device": "cpu", "torch_version": "2", "profile": "h200", "basis": "b",
                                     "model": "tiny", "parameters": shape.parameters, "rows": [failed, row]})
    assert "failed: AssertionError: boom" in table and f"{row['memory_error']:+.1%}" in table
