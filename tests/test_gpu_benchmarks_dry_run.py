"""The GPU benchmarks' CPU dry runs: the same code paths on a tiny model, so that the scripts
run unattended on a GPU machine. benchmarks/gpu_vs_torchtitan.py trains scaletrain's side and
records torchtitan's as not installed (or, where it is, checks the model it would build);
benchmarks/gpu_float8_check.py trains bf16 and finds float8 refused in one line on the CPU."""

from __future__ import annotations

import json
import sys

from tests.helpers import REPO, run


def test_gpu_benchmarks_dry_runs(tmp_path):
    done = run([sys.executable, str(REPO / "benchmarks" / "gpu_vs_torchtitan.py"), "--dry-run", "--out",
                str(tmp_path / "tt")], timeout=180, check=True)
    results = json.loads((tmp_path / "tt" / "gpu_vs_torchtitan.json").read_text())["results"]
    ours = results["scaletrain"]
    assert ours["tokens_per_second"] > 0 and len(ours["tokens_per_second_windows"]) == 3, ours
    assert ours["parameters_match"], ours  # the Hugging Face model has the architecture's size
    theirs = results["torchtitan"]
    assert theirs.get("parameters_match") or "cannot import torchtitan" in theirs.get("error", ""), theirs
    assert "| scaletrain |" in (tmp_path / "tt" / "gpu_vs_torchtitan.md").read_text(), done.stdout

    done = run([sys.executable, str(REPO / "benchmarks" / "gpu_float8_check.py"), "--dry-run", "--steps", "3",
                "--out", str(tmp_path / "f8")], timeout=180, check=True)
    report = json.loads((tmp_path / "f8" / "gpu_float8_check.json").read_text())
    assert len(report["bf16"]["losses"]) == 6, report["bf16"]
    assert "but this run is on the cpu" in report["float8"]["refused"], report["float8"]
