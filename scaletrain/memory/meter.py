"""How much memory this process uses: now, at its baseline (before the model was built), and
at its peak during training.

On CUDA the figures are the caching allocator's (`memory_allocated`, `max_memory_allocated`;
`max_memory_reserved` beside them: what the allocator holds from the driver). On a CPU they
are the process's resident memory (`VmRSS`, and its high-water mark `VmHWM`, which Linux
resets when asked through /proc/self/clear_refs): everything the process holds, torch and
Python themselves included, which is what a per-process memory limit counts.

Evaluation is not training: the peak is kept across training only — a snapshot before each
evaluation, the high-water mark reset after it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> Optional[int]:
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def _resident_peak_fallback() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class MemoryMeter:
    """This process's memory on `device`: `baseline`, `current()`, and `peak()` over training."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self._peak = 0
        self._resettable = True
        self.baseline = self.current()
        self.reset_peak()

    def current(self) -> int:
        if self.cuda:
            return int(torch.cuda.memory_allocated(self.device))
        rss = _status_kib("VmRSS")
        return rss if rss is not None else _resident_peak_fallback()

    def _high_water(self) -> int:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated(self.device))
        hwm = _status_kib("VmHWM")
        return hwm if hwm is not None else _resident_peak_fallback()

    def reset_peak(self) -> None:
        """Forget the high-water mark (what was kept by `snapshot` stays). On a CPU the
        allocator first hands back what it holds free: after an evaluation, resident memory
        would otherwise keep evaluation's larger batches as the new high-water mark."""
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        from .allocator import release_free_memory

        release_free_memory()
        try:
            _CLEAR_REFS.write_text("5")  # resets VmHWM to the current resident size
        except OSError:
            self._resettable = False  # the peak then spans the process's whole life

    def snapshot(self) -> None:
        """Keep the peak so far (before something that is not training, such as evaluation)."""
        self._peak = max(self._peak, self._high_water())

    def peak(self) -> int:
        self.snapshot()
        return self._peak

    def reserved_peak(self) -> Optional[int]:
        return int(torch.cuda.max_memory_reserved(self.device)) if self.cuda else None

    def facts(self) -> dict:
        facts = {"baseline_bytes": self.baseline, "peak_bytes": self.peak(), "current_bytes": self.current()}
        if self.cuda:
            facts["peak_reserved_bytes"] = self.reserved_peak()
        else:
            # What a per-process data limit (ulimit -d, RLIMIT_DATA) counts: every private
            # writable mapping, reserved or touched.
            facts["data_segment_bytes"] = _status_kib("VmData")
        return facts
