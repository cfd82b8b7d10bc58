"""How well a run uses its hardware: the model's FLOPs per step, counted once by torch's own
counter on the real model and batch (forward and backward; activation checkpointing's
recomputation apart, as hardware FLOPs), achieved TFLOP/s, and MFU against the devices' peak.

The count is taken on the second training step this process runs (the first compiles, warms
caches, and is the one start-up time is measured to: nothing here is on the path to it), under
a dispatch mode that records each operator's FLOPs (`scaletrain.flops`); compiled blocks run
eagerly for that one step so that their operators are seen. Every rank counts its own share
(a shard, a stage, a slice) and the shares are summed.

The peak: a GPU's from the hardware profile whose CUDA names hold the device's exact name —
an unknown GPU gets TFLOP/s and the reason it has no MFU, never a guessed peak; a CPU's from a
short matrix multiply timed in every process at once, with the run's threads and precision
(what the processes share is what they can reach together).
"""

from __future__ import annotations

import contextlib
import time
from typing import Optional

import torch

#: Seconds a CPU's matrix-multiply peak is timed for (after a warm-up).
CPU_PEAK_SECONDS = 0.1


class Utilisation:
    def __init__(self, run, samples_per_step: int):
        self.run = run
        self.samples_per_step = samples_per_step  # per optimizer step, over the job
        self.count_at: Optional[int] = None
        self.flops_per_sample: Optional[float] = None
        self.recompute_per_sample: float = 0.0
        self.peak: Optional[float] = None  # FLOP/s of every device together
        self.peak_source = ""
        self.note = "not counted: the run took fewer than two training steps"
        self.paused = 0.0  # seconds this took out of the epoch it happened in

    @contextlib.contextmanager
    def step(self, steps_taken: int, samples: int):
        """Wraps one `train_step`; counts the second one this process runs."""
        if self.count_at is None:
            self.count_at = steps_taken + 1
        if steps_taken != self.count_at or self.flops_per_sample is not None:
            yield
            return
        from ..flops import TraceMode  # here: nothing of it on the path to the first step

        mode = TraceMode(fingerprints=self.run.topology.dims.tp > 1)
        with _eager(), mode:
            yield
        began = time.perf_counter()
        self._finish(mode.trace, samples)
        self.paused += time.perf_counter() - began

    def take_paused(self) -> float:
        paused, self.paused = self.paused, 0.0
        return paused

    def _finish(self, trace, samples: int) -> None:
        run = self.run
        peak, source, reason = device_peak(run)
        replicated = replicated_flops(run, trace)
        model = trace.model_flops - replicated.get("forward", 0.0) - replicated.get("backward", 0.0)
        mine = torch.tensor([float(model), float(trace.recompute_flops - replicated.get("recompute", 0.0)),
                             float(samples),
                             float(peak or 0.0), 0.0 if peak else 1.0, float(len(trace.uncounted))],
                            dtype=torch.float64)
        total = run.sum(mine).tolist()
        # Tensor-parallel peers and a pipeline's stages read the same samples: a step's samples
        # are each data-parallel shard's once.
        samples_global = total[2] * run.data_parallel_size / run.world_size
        self.flops_per_sample = total[0] / samples_global if samples_global else None
        self.recompute_per_sample = total[1] / samples_global if samples_global else 0.0
        if total[4] == 0 and total[3] > 0:
            self.peak, self.peak_source, self.note = total[3], source, ""
        else:
            self.note = reason or "no peak known for some of the devices"
        if total[5]:
            self.note = "; ".join(filter(None, [partial_note(trace.uncounted), self.note]))

    def fields(self, samples_per_second: Optional[float]) -> dict:
        """Achieved TFLOP/s and MFU at this rate of samples (the whole job's)."""
        if self.flops_per_sample is None or not samples_per_second:
            return {}
        flops = self.flops_per_sample * samples_per_second
        out = {"tflops_per_second": flops / 1e12}
        if self.peak:
            out["mfu"] = flops / self.peak
        return out

    def summary(self, samples_per_second: Optional[float]) -> dict:
        if self.flops_per_sample is None:
            return {"model_flops_per_step": None, "tflops_per_second": None, "mfu": None, "mfu_note": self.note}
        out = {"model_flops_per_step": self.flops_per_sample * self.samples_per_step,
               "hardware_flops_per_step": (self.flops_per_sample + self.recompute_per_sample) * self.samples_per_step,
               "tflops_per_second": None, "mfu": None,
               "peak_tflops_per_second": self.peak / 1e12 if self.peak else None, "peak_source": self.peak_source}
        out.update(self.fields(samples_per_second))
        if self.note:
            out["mfu_note"] = self.note
        return out


def replicated_flops(run, trace) -> dict:
    """{phase: FLOPs} this process counted for operators that every one of its tensor-parallel
    peers computed alike (the same inputs: a layer the plan leaves whole, such as an output
    head, run on the same activations by each), less this process's 1/tp share of them: what
    to take away so that, summed over the peers, the model's work counts once. Collective."""
    tp = run.topology.dims.tp
    if tp == 1:
        return {}
    from ..parallel.dims import MESH_DIMS, TP

    mine = torch.stack([fp for _phase, _flops, fp in trace.pieces]).to(run.device) if trace.pieces else \
        torch.zeros(0, dtype=torch.float64, device=run.device)
    counts = [int(n) for n in run.gather(torch.tensor([len(trace.pieces)], device=run.device)).tolist()]
    everyone = run.gather(mine).cpu()
    starts = [sum(counts[:r]) for r in range(len(counts))]
    where = run.topology.dims.coordinates
    peers = [r for r in range(run.world_size) if r != run.rank
             and all(where(r)[name] == where(run.rank)[name] for name in MESH_DIMS if name != TP)]
    if any(counts[r] != len(trace.pieces) for r in peers):
        return {}  # not the same operators: nothing to compare
    same = torch.ones(len(trace.pieces), dtype=torch.bool)
    for r in peers:
        same &= everyone[starts[r]:starts[r] + counts[r]] == mine.cpu()
    removed: dict = {}
    for (phase_, flops, _fp), alike in zip(trace.pieces, same.tolist()):
        if alike:
            removed[phase_] = removed.get(phase_, 0.0) + flops * (1 - 1 / tp)
    return removed


def partial_note(uncounted: dict) -> str:
    """Why MFU is partial: the operators whose FLOP formula failed (counted as 0), as this
    process saw them."""
    named = "; ".join(f"{op}: {why}" for op, why in sorted(uncounted.items())) or "on another process"
    return f"MFU is partial: the FLOPs of some operators could not be counted and count as 0 ({named[:300]})"


@contextlib.contextmanager
def _eager():
    """Compiled code run eagerly for the counted step, so the counter sees its operators."""
    stance = getattr(torch.compiler, "set_stance", None)
    if stance is None:
        yield
        return
    with stance("force_eager"):
        yield


def device_peak(run) -> tuple[Optional[float], str, str]:
    """(this process's peak FLOP/s, where it came from, why there is none)."""
    device, precision = run.device, run.strategy.precision
    if device.type == "cuda":
        from ..hardware import for_device_name

        name = torch.cuda.get_device_name(device)
        profile, reason = for_device_name(name)
        if profile is None:
            return None, "", reason
        dtype = {"bf16": "bf16", "fp16": "fp16"}.get(precision) or \
            ("tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32")
        peak = profile.peak(dtype)
        if not peak:
            return None, "", f"the {profile.name} profile has no {dtype} peak"
        return peak, f"{profile.name} profile, {dtype} dense peak per GPU", ""
    if device.type == "cpu":
        peak, dtypes = cpu_peak(precision)
        which = f"the faster of a {' and a '.join(dtypes)}" if len(dtypes) > 1 else f"a {dtypes[0]}"
        return peak, f"{which} matrix multiply, timed in every process", ""
    return None, "", f"no peak is known for {device.type} devices"


def cpu_peak(precision: str) -> tuple[float, list[str]]:
    """(this process's peak FLOP/s for a run in `precision`, the dtypes timed): the fastest
    matrix multiply among those the run computes in. Under bf16 or fp16 autocast a CPU still
    does work in float32 (what autocast leaves, and, on CPUs without half-precision units,
    the half-precision products themselves, converted), so the float32 rate is timed too:
    a peak below what the run does would make MFU exceed 100%."""
    dtypes = [torch.float32] + [d for d in ({"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision),) if d]
    rates = {str(d).replace("torch.", ""): cpu_matmul_peak(d) for d in dtypes}
    return max(rates.values()), list(rates)


def cpu_matmul_peak(dtype=torch.float32, seconds: float = CPU_PEAK_SECONDS) -> float:
    """FLOP/s of a square matrix multiply on this process's threads (the best of its repeats)."""
    n = 512
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(2):
        a @ b
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        a @ b
        best = max(best, 2.0 * n ** 3 / max(time.perf_counter() - start, 1e-9))
    return best
