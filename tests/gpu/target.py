"""What the GPU checks run on: CUDA with NCCL and the GPUs torch sees, or nothing.

Without a GPU every check is skipped, with one reason. `SCALETRAIN_GPU_CHECK_CPU=N` runs the
very same checks on the CPU with Gloo, as if N devices were visible: the commands, the
parsing of their results and the results file are then exercised on a machine without a
GPU (for working on the checks themselves; it is slow on a small machine and not part of CI).

    python -m tests.gpu.target    # one line: what would be checked; exit 3 when nothing

Only torch's device count is read here (no CUDA context is made in the test process: the
checks' own processes use the GPUs); names and versions come from `tests.gpu.machine`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

CPU_SWITCH = "SCALETRAIN_GPU_CHECK_CPU"
#: Exit status of `python -m tests.gpu.target` when there is nothing to check.
NOTHING_TO_CHECK = 3


@dataclass(frozen=True)
class Target:
    device: str = ""   # "cuda" or "cpu"; "" when there is nothing to check on
    backend: str = ""  # the backend of one process per device: "nccl" on CUDA, "gloo" on the CPU
    count: int = 0     # devices visible (on the CPU: as many as the switch says)
    why_not: str = ""  # why nothing is checked ("" when something is)

    @property
    def available(self) -> bool:
        return bool(self.device)

    @property
    def skip_reason(self) -> str:
        return f"{self.why_not}: a GPU check ({CPU_SWITCH}=N runs it on the CPU)"

    @property
    def noun(self) -> str:
        return "GPU" if self.device == "cuda" else "pretend device"

    def lacks(self, devices: int, what: str = "") -> str:
        """Why a check that needs `devices` devices cannot run here ("" when it can)."""
        if self.count >= devices:
            return ""
        because = f": {what}" if what else ""
        return f"needs {devices} {self.noun}s, {self.count} visible{because}"

    def flags(self) -> list[str]:
        """--device and --backend for a scaletrain command of one process per device."""
        return ["--device", self.device, "--backend", self.backend]

    def describe(self) -> str:
        if self.device == "cuda":
            return f"{self.count} CUDA GPU(s), NCCL"
        return f"the CPU with Gloo, as if {self.count} devices were visible ({CPU_SWITCH}={self.count})"


def detect(environ=None) -> Target:
    environ = os.environ if environ is None else environ
    pretend = environ.get(CPU_SWITCH, "").strip()
    if pretend:
        if not pretend.isdigit() or int(pretend) < 1:
            raise ValueError(f"{CPU_SWITCH}={pretend}: give the number of devices the CPU stands in for, e.g. "
                             f"{CPU_SWITCH}=2 (or unset it to check the GPUs)")
        return Target("cpu", "gloo", int(pretend))
    import torch

    if not torch.cuda.is_available():
        build = "built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no device"
        return Target(why_not=f"no CUDA GPU visible (torch {torch.__version__}, {build})")
    return Target("cuda", "nccl", torch.cuda.device_count())


def target_or_reason() -> Target:
    """detect(), with a bad switch value as the reason nothing runs (pytest shows it once
    per check instead of failing to collect)."""
    try:
        return detect()
    except ValueError as exc:
        return Target(why_not=str(exc))


TARGET = target_or_reason()


def main() -> int:
    try:
        target = detect()
    except ValueError as exc:
        print(f"gpu-check: {exc}", file=sys.stderr)
        return 2
    if not target.available:
        print(f"gpu-check: {target.why_not}: nothing to check.")
        return NOTHING_TO_CHECK
    print(f"gpu-check: checking on {target.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
