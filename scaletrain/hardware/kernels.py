"""Attention kernels' speeds as their authors published them at the time (kernels/attention.json:
FlashAttention 1, 2 and 3, cuDNN, Triton and xformers' memory-efficient kernel on A100 and
H100, from the FlashAttention-2 and -3 papers' figures), and the time of an attention from
them or from a calibration.

Rates are in the FlashAttention benchmarks' convention: a causal attention counts half the
score matrix (the causal fraction is explicit here: `CAUSAL_FRACTION`), backward 2.5 ×
forward's FLOPs. torch's FLOP counter, which the planner's trace uses, counts the whole matrix;
`attention_seconds` converts. Where a figure gives forward and backward together, or forward
alone, the other is taken with FlashAttention-2's own split on H100 (its forward from the
FlashAttention-3 figure, its forward + backward from its paper's): backward rate / forward rate
0.8–0.9, by sequence length and causality — an estimate for the kernels whose backward was not
published, said so in docs/cluster-planning.md.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

HERE = Path(__file__).parent / "kernels"

#: Of a causal attention's score matrix (queries × keys of one sequence), the share a causal
#: kernel computes: the tiles on and below the diagonal, half of it (the published rates count
#: that half, so the tiles' diagonal waste is in the rates).
CAUSAL_FRACTION = 0.5
#: The Triton FlashAttention of 2022–23 (flash-attn's flash_attn_triton, which training libraries of
#: the time ran) was published against FlashAttention-2 on A100s only (the FA2 paper's figure); on
#: Hopper it is taken as FlashAttention-2's H100 rate × its A100 ratio to FlashAttention-2 — an
#: estimate. `triton` on Hopper is the FA3 paper's Triton kernel of 2024.
TRITON_2023 = "triton-2023"


@functools.lru_cache(maxsize=1)
def _series() -> tuple:
    return tuple(json.loads((HERE / "attention.json").read_text())["series"])


def kernels(architecture: str) -> list[str]:
    found = {s["kernel"] for s in _series() if s["architecture"] == architecture}
    return sorted(found | ({TRITON_2023} if "flash2" in found else set()))


def _interpolate(points: list, seq: float) -> float:
    points = sorted(points)
    if seq <= points[0][0]:
        return points[0][1]
    for (s0, r0), (s1, r1) in zip(points, points[1:]):
        if seq <= s1:
            t = (math.log2(seq) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return r0 + t * (r1 - r0)
    return points[-1][1]


def _published(architecture: str, kernel: str, mode: str, causal: bool, head_dim: float, seq: float):
    """TFLOP/s of one published series, interpolated in head_dim (linearly between the figures'
    64, 128 and 256) and in log seq; None where the figure has no such series."""
    rows = [s for s in _series() if (s["architecture"], s["kernel"], s["mode"], s["causal"]) ==
            (architecture, kernel, mode, causal)]
    if not rows:
        return None
    by_dim = sorted((s["head_dim"], _interpolate(s["points"], seq)) for s in rows)
    if head_dim <= by_dim[0][0]:
        return by_dim[0][1]
    for (d0, r0), (d1, r1) in zip(by_dim, by_dim[1:]):
        if head_dim <= d1:
            return r0 + (head_dim - d0) / (d1 - d0) * (r1 - r0)
    return by_dim[-1][1]


def _split(causal: bool, head_dim: float, seq: float) -> float:
    """FlashAttention-2's backward rate ÷ forward rate on H100 (its forward from the FA3 figure,
    forward + backward from the FA2 figure): 3.5/C = 1/F + 2.5/B."""
    d = min(head_dim, 128)
    forward = _published("sm90", "flash2", "fwd", causal, d, seq)
    both = _published("sm90", "flash2", "fwd_bwd", causal, d, seq)
    backward = 2.5 / (3.5 / both - 1 / forward)
    return backward / forward


def published_rates(architecture: str, kernel: str, causal: bool, head_dim: float, seq: float):
    """(forward, backward) TFLOP/s of `kernel` in the FlashAttention convention, or None where
    no figure describes it on this architecture."""
    if kernel == TRITON_2023:
        if architecture == "sm80":
            return published_rates(architecture, "triton", causal, head_dim, seq)
        flash2 = published_rates(architecture, "flash2", causal, head_dim, seq)
        a100 = [_published("sm80", k, "fwd_bwd", causal, head_dim, seq) for k in ("triton", "flash2")]
        if flash2 is None or None in a100:
            return None
        return tuple(rate * a100[0] / a100[1] for rate in flash2)
    ratio = _split(causal, head_dim, seq)
    forward = _published(architecture, kernel, "fwd", causal, head_dim, seq)
    both = _published(architecture, kernel, "fwd_bwd", causal, head_dim, seq)
    if forward is not None and both is not None:
        return forward, 2.5 / max(1e-9, 3.5 / both - 1 / forward)
    if both is not None:  # 3.5/C = 1/F + 2.5/(r F)
        forward = both * (1 + 2.5 / ratio) / 3.5
        return forward, ratio * forward
    if forward is not None:
        return forward, ratio * forward
    return None


def head_dim_factor(architecture: str, causal: bool, head_dim: float, seq: float) -> float:
    """How much faster a kernel runs at `head_dim` than at 128, from the published figures
    (cuDNN's on Hopper, FlashAttention-2's on Ampere): a calibration measured at 128 only."""
    kernel = "cudnn" if architecture == "sm90" else "flash2"
    mode = "fwd" if architecture == "sm90" else "fwd_bwd"
    at = _published(architecture, kernel, mode, causal, head_dim, seq)
    base = _published(architecture, kernel, mode, causal, 128, seq)
    return at / base if at and base else 1.0
