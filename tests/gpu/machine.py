"""The machine the GPU checks ran on, for the head of the results file: the GPUs' names,
memory and compute capability, the driver, and the versions of everything that decides how
the CUDA paths behave (torch, CUDA, cuDNN, NCCL, Python, scaletrain and its commit).

    python -m tests.gpu.machine    # prints them as JSON

It runs in a process of its own so that the test process never holds a CUDA context."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _command(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def facts() -> dict:
    import torch

    from scaletrain.process.cores import cpu_cores
    from scaletrain.version import __version__

    found = {
        "gpus": [],
        "driver": "",
        "cpu": f"{_cpu_model()}, {cpu_cores()} core(s) usable",
        "versions": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": None,
            "nccl": None,
            "python": platform.python_version(),
            "scaletrain": __version__,
            "commit": _command(["git", "rev-parse", "--short", "HEAD"]) or None,
        },
    }
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            found["gpus"].append({"index": index, "name": props.name, "memory_bytes": props.total_memory,
                                  "compute_capability": f"{props.major}.{props.minor}"})
        found["versions"]["cudnn"] = torch.backends.cudnn.version()
        try:
            found["versions"]["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError, TypeError):
            pass
        drivers = _command(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
        found["driver"] = drivers[0] if drivers else ""
    return found


def read(timeout: float = 120) -> dict:
    """facts(), from a fresh process; {"error": ...} when that process fails."""
    try:
        done = subprocess.run([sys.executable, "-m", "tests.gpu.machine"], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"reading the machine's facts took over {timeout:g} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout)


if __name__ == "__main__":
    print(json.dumps(facts(), indent=1))
