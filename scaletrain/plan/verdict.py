"""The plain-words conclusions of a plan: does distributing pay, and does the model fit."""

from __future__ import annotations

from typing import Optional

from ..foundation.defaults import WORTH_AT_SPEEDUP
from .predict import Prediction


def gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.3g} MB"


def error_line(error: Optional[float], rounds: int) -> str:
    if error is None:
        return (f"Expected error: unknown from {rounds} round(s) of measurement; give --probe-rounds 2 or more "
                "for an interval.")
    return (f"Expected error: ±{error:.0%} — the widest 95% interval of a predicted speedup over {rounds} rounds "
            "of measurement (the measurements' own noise; `scaletrain bench` compares predictions with measured "
            "runs).")


#: Efficiency on one machine beyond which a prediction is a measurement's error, not a
#: forecast: processes sharing one machine's cores do not make each other faster than n
#: times one process with all of them (a little above 1 happens: cores' own caches).
MAX_ONE_MACHINE_EFFICIENCY = 1.25

#: How much faster than the whole model on one CPU any other one-process configuration on
#: that same CPU (a split model, a one-stage pipeline) may be predicted before the figure is
#: taken for a measurement's error.
MAX_ONE_PROCESS_ON_ONE_CPU = 1.1


def implausible(p: Prediction, probe=None) -> Optional[str]:
    """Why a prediction cannot be right (the measurements behind it were disturbed), or None."""
    if p.world_size > 1 and p.nodes == 1 and p.efficiency > MAX_ONE_MACHINE_EFFICIENCY:
        return (f"{p.strategy} ×{p.world_size} at {p.speedup:.2f}× ({p.efficiency:.0%} efficiency) on one machine: "
                "its processes share one machine's cores, so the measurements behind it were disturbed")
    cpu = probe is None or getattr(probe, "device_type", "cpu") != "cuda"
    # Every one-process configuration on a CPU does the same arithmetic on the same cores as
    # the reference: a split model, a one-stage pipeline, DDP + model parallel's one replica alike.
    if cpu and p.world_size == 1 and p.speedup > MAX_ONE_PROCESS_ON_ONE_CPU:
        return (f"{p.strategy} at {p.speedup:.2f}× one process on one CPU: the same arithmetic on the same cores cannot "
                "be that much faster, so the measurements behind it were disturbed")
    return None


def verdicts(predictions: list[Prediction], device_memory_bytes: float,
             worth_at: float = WORTH_AT_SPEEDUP, probe=None, noise: Optional[tuple] = None) -> list[str]:
    """The conclusions. `noise`: (expected error, rounds, bound) when the measurements were
    too noisy to tell: then no configuration is named the best."""
    lines = []
    single = next((p for p in predictions if p.world_size == 1), None)
    if single is not None and not single.fits:
        lines.append(f"The model does not fit one device: {gb(single.memory_bytes)} needed, "
                     f"{gb(device_memory_bytes)} available (--device-memory-gb).")
        smallest: dict[str, Prediction] = {}
        for p in predictions:
            if p.fits and p.world_size > 1 and (p.strategy not in smallest or p.world_size < smallest[p.strategy].world_size):
                smallest[p.strategy] = p
        if smallest:
            for p in sorted(smallest.values(), key=lambda p: p.world_size):
                lines.append(f"  {p.strategy} fits from {p.world_size} processes: {gb(p.memory_bytes)} per device.")
        else:
            lines.append("  No strategy and world size planned here fits; try larger --world-sizes or fsdp/pipeline.")
    # Whether the model fits rests on memory, not on timing: it comes first, and a disturbed
    # step-time measurement does not hide it.
    reasons = [(p, implausible(p, probe)) for p in predictions]
    errors = [reason for _, reason in reasons if reason]
    for reason in errors:
        lines.append(f"Measurement error, not a prediction: {reason}.")
    multi = [p for p, reason in reasons if p.world_size > 1 and p.fits and not reason]
    if noise is not None:
        error, rounds, bound = noise
        wide = f"±{error:.0%}" if error is not None else "unknown"
        lines.append(f"Cannot tell at this noise level: the predictions' expected error is {wide} after {rounds} "
                     f"round(s) of measurement (more than the ±{bound:.0%} bound, --max-error); measure on a quieter "
                     "machine or longer (--budget). No configuration is named the best.")
        return lines
    if errors:
        lines.append("The measurements were disturbed: measure again on a quieter machine before trusting any figure.")
        return lines
    if not multi:
        return lines
    best = max(multi, key=lambda p: p.speedup)
    if best.speedup < worth_at:
        comm = max(best.exposed_comm_s, 0.0)
        lines.append(f"Distributing will not pay here: the best prediction is {best.speedup:.2f}× "
                     f"({best.strategy} on {best.world_size} processes), because each step would spend "
                     f"{comm * 1e3:.1f} ms communicating against {best.compute_s * 1e3:.1f} ms of compute"
                     f"{' at ' + str(best.threads) + ' thread(s) per process' if best.threads else ''}.")
    else:
        lines.append(f"Best predicted: {best.strategy} on {best.world_size} processes, {best.speedup:.2f}× "
                     f"({best.efficiency:.0%} efficiency).")
    return lines


def fit_advice(probe, predictions: list[Prediction], machine, strategy_options: Optional[dict] = None) -> list[str]:
    """For each configuration that does not fit, the cheapest change that makes it fit:
    activation checkpointing (a second forward of each block), else — on GPUs — FSDP's CPU
    offload; more shards are said by `verdicts`."""
    from .configuration import takes
    from .predict import predict

    lines = []
    for p in predictions:
        if p.fits:
            continue
        base = {**(strategy_options or {}), **p.options}
        ac = predict(probe, p.strategy, p.world_size, machine, {**base, "activation_checkpointing": "full"})
        if ac is not None and ac.fits:
            lines.append(f"  {p.strategy} ×{p.world_size} fits with --activation-checkpointing full: "
                         f"{gb(ac.memory_bytes)} per device instead of {gb(p.memory_bytes)}, {ac.speedup:.2f}× "
                         f"instead of {p.speedup:.2f}×.")
            continue
        if probe.device_type == "cuda" and takes(p.strategy, "offload"):
            fp = probe.footprint
            states = (fp.param_bytes + fp.grad_bytes + fp.optimizer_bytes) / max(1, p.world_size)
            if p.memory_bytes - states <= machine.device_memory_bytes:
                lines.append(f"  {p.strategy} ×{p.world_size} fits with --offload (its state in CPU memory): about "
                             f"{gb(p.memory_bytes - states)} per device.")
    return lines
