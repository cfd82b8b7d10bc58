"""A run's memory, as methods of `Run`: this process's figures (`MemoryMeter`, made by `init`
once the process group is up: its baseline is the process, torch and the group, no model
yet), and every rank's, gathered for the run's summary."""

from __future__ import annotations

import torch


class RunMemory:
    """Mixed into Run: uses its `memory`, `ctx` and `gather`."""

    def memory_stats(self) -> dict:
        """This process's memory in bytes: `baseline_bytes` (at init, before the model was
        built), `peak_bytes` (the most during training: evaluation left out), `current_bytes`;
        on CUDA the allocator's figures (and `peak_reserved_bytes`), on a CPU resident memory."""
        return self.memory.facts()

    def _memory_per_rank(self) -> dict:
        """Every rank's baseline and peak memory, in rank order (collective)."""
        mine = self.memory.facts()
        names = {"baseline_bytes": "baseline_memory_bytes", "peak_bytes": "peak_memory_bytes",
                 "peak_reserved_bytes": "peak_memory_reserved_bytes", "data_segment_bytes": "data_segment_bytes"}
        keys = [k for k in names if mine.get(k) is not None]
        values = self.gather(torch.tensor([[float(mine[k]) for k in keys]], dtype=torch.float64,
                                          device=self.ctx.gather_device))
        return {names[k]: [int(row[i]) for row in values.tolist()] for i, k in enumerate(keys)}
