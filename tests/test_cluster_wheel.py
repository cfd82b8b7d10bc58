"""From an installed package: the wheel built from the repository carries the hardware profiles,
their calibrations and the attention kernels' rates, and `scaletrain plan --hardware` works
from it — installed into a fresh virtual environment (with the system's site-packages, so that
torch is not installed again), run from a folder outside the repository."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path

from tests.helpers import REPO, run


def _clean_env() -> dict:
    """No PYTHONPATH: the process must import the installed package, not the repository."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def test_plan_hardware_from_an_installed_wheel(tmp_path):
    source = tmp_path / "source"  # a copy: building in the repository would leave build/ behind
    shutil.copytree(REPO / "scaletrain", source / "scaletrain", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                 str(source)], timeout=240, env=_clean_env(), cwd=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next(wheels.glob("scaletrain-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for data in ("scaletrain/hardware/profiles/h100-sxm-80g.toml", "scaletrain/hardware/calibrations/h200.json",
                 "scaletrain/hardware/kernels/attention.json"):
        assert data in names, f"{data} is not in the wheel"

    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], timeout=120, env=_clean_env())
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(wheel)],
                    timeout=240, env=_clean_env(), cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    where = run([str(python), "-c", "import scaletrain; print(scaletrain.__file__)"], timeout=60, env=_clean_env(),
                cwd=tmp_path)
    assert str(venv) in where.stdout, f"imported from {where.stdout!r}, not the wheel installed in {venv}"

    planned = run([str(venv / "bin" / "scaletrain"), "plan", "--hardware", "h100-sxm-80g", "--model-config",
                   "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--strategy", "fsdp", "--micro-batch", "1",
                   "--activation-checkpointing", "full", "--choose"], timeout=240, env=_clean_env(), cwd=tmp_path)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "Chosen: fsdp 8, mb 1, AC full" in planned.stdout and "calibration measured on NVIDIA H200" in planned.stdout
