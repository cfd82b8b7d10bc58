"""Activation checkpointing's cost terms: the checkpointed blocks' forward computed again in
backward, and the activations forward keeps for backward: a block's input instead of all it
computes (as measured by the probe), plus one block's activations computed again at a time."""

from __future__ import annotations

from typing import Optional

from ...parallel.config import ParallelConfig
from .. import formulas as f
from ..probe import Probe
from .registry import CostTerms, register
from .terms import Step, Terms

#: Share of forward + backward that activation checkpointing computes again: the whole forward;
#: the operator-level policy recomputes only cheap operations.
RECOMPUTED = {"full": f.FORWARD_SHARE, "selective": 0.1}

#: Checkpointing changes how one process computes, not how processes share the work: a

#: A checkpointed block's backward: its activations computed again, and their gradients
#: alongside, in units of the block's saved activations — where the probe did not measure
#: the model's own (Footprint.recompute_height: the GPT 0.9, a Llama 1.7).
RECOMPUTE_HEIGHT = 1.2


def recompute_seconds(config: ParallelConfig, forward_backward_s: float) -> float:
    """What activation checkpointing adds to a step: the checkpointed blocks' forward again."""
    mode = config.option("activation_checkpointing", "none")
    if mode == "none":
        return 0.0
    every = config.option("ac_every")
    share = RECOMPUTED["full"] / every if every else RECOMPUTED[mode]
    return share * forward_backward_s


def terms(step: Step) -> Terms:
    if step.config.local_devices is not None:
        return Terms()  # a process driving its own devices: predicted from its measured step's parts as they are
    return Terms(compute_s=recompute_seconds(step.config, step.compute.fb_s * step.work_share))


def kept_activation_bytes(probe: Probe, config: ParallelConfig, units: list[int], share: float, samples: float,
                          microbatch: Optional[float] = None) -> Optional[float]:
    """What forward keeps for backward of `samples` samples in these units (a stage) under the
    configuration's checkpointing, plus the one block of one micro-batch (`microbatch`
    samples; default `samples`) whose activations backward computes again at a time; None
    where the probe did not measure what this mode keeps."""
    fp = probe.footprint
    per_unit = fp.block_activation_bytes_per_sample or ()
    whole = fp.activation_bytes_per_sample
    mine = sum(per_unit[i] for i in units) if len(per_unit) == len(fp.block_param_bytes) else whole
    mode = config.option("activation_checkpointing", "none")
    kept = fp.checkpointed_activation_bytes_per_sample.get(mode) if mode != "none" else None
    if kept is None:
        return None
    every = config.option("ac_every")
    if every:  # every k-th block whole-checkpointed: that share of the blocks' savings
        kept = whole - (whole - fp.checkpointed_activation_bytes_per_sample.get("full", whole)) / every
    fraction = mine / whole if whole else 1.0
    # Backward computes one block's activations again (for one micro-batch) and, going through
    # it, their gradients: the height of that, in units of the block's saved activations, is the
    # model's own, measured by the probe (measure/footprint.py's recompute_height).
    height = fp.recompute_height or RECOMPUTE_HEIGHT
    recomputed = height * max((per_unit[i] for i in units), default=0.0) if per_unit else 0.0
    return (kept * fraction * samples + recomputed * (samples if microbatch is None else microbatch)) * share


#: The checkpointing modes a choice tries: none, then full (the cheapest change that saves most memory).
CHECKPOINTING = ("none", "full")


def variants() -> list[dict]:
    """Every candidate as it is and with full checkpointing."""
    return [{"activation_checkpointing": mode} if mode != "none" else {} for mode in CHECKPOINTING]


COSTS = register(CostTerms("activation_checkpointing", distributes=False, terms=terms,
                          kept_activation_bytes=kept_activation_bytes, variants=variants))
