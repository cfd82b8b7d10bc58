"""What a cluster plan predicts for one configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import ClusterConfig


@dataclass
class ClusterPrediction:
    config: ClusterConfig
    step_seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    bubble_seconds: float
    tokens_per_second_per_gpu: float
    model_flops_per_step: float
    """Forward and backward as torch's FLOP counter counts them (attention's whole score matrix)."""
    hardware_flops_per_step: float
    """Also what activation checkpointing computes again."""
    mfu: float
    """Model FLOPs (torch's count) per second ÷ the GPUs' bf16 peak."""
    mfu_published: float
    """The published convention's MFU (see `flop_conventions.published_flops_per_token`)."""
    memory: dict  # part -> bytes
    memory_bytes: float
    fits: bool
    microbatches: int
    comm: dict = field(default_factory=dict)  # what each collective costs, exposed
    runnable: str = ""
    """Why `scaletrain train` cannot run this configuration as its flags print it ("": it can)."""
