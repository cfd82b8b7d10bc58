"""The cluster planner's entry: a `ClusterRequest` in (GPUs of a hardware profile, a model's
shape, what the user fixed), a `ClusterPlan` out (every configuration predicted, the fastest
that fits and its runner-up). `scaletrain.plan.make_plan` hands such a request here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...foundation.errors import UsageError
from .config import ClusterScenario
from .prediction import ClusterPrediction
from .search import LAYOUTS, Fixed

#: The layouts a cluster plan takes as --strategy.
STRATEGIES = tuple(name for name in LAYOUTS if name)


@dataclass(frozen=True)
class ClusterRequest:
    hardware: str
    """A hardware profile's name (a100-80g, h100-sxm-80g, h100-96g, h200) or a profile .toml."""
    model_config: Optional[str]
    """llama3-8b, llama3-70b, llama3-405b or a transformers config.json."""
    gpus: Optional[int] = None
    """GPUs in all (None: one node's)."""
    gpus_per_node: Optional[int] = None
    """None: the profile's."""
    seq_len: int = 8192
    global_batch: Optional[int] = None
    """Sequences per optimizer step (None: 2 per GPU)."""
    fixed: Fixed = Fixed()
    """What the user fixed (the rest is searched); its strategy one of STRATEGIES or None."""


@dataclass(frozen=True)
class ClusterPlan:
    scenario: ClusterScenario
    predictions: list[ClusterPrediction]
    """Every configuration predicted, the fastest first."""
    best: Optional[ClusterPrediction]
    """The fastest that fits (None: nothing fits)."""
    runner_up: Optional[ClusterPrediction]

    def as_dict(self) -> dict:
        from . import report

        s, profile = self.scenario, self.scenario.profile
        return {"hardware": profile.name, "basis": profile.basis, "model": s.shape.name,
                "parameters": s.shape.parameters, "gpus": s.gpus, "gpus_per_node": s.gpus_per_node,
                "seq_len": s.seq, "global_batch": s.global_batch,
                "configurations": [report.row(p, s) for p in self.predictions],
                "chosen": report.row(self.best, s) if self.best else None,
                "runner_up": report.row(self.runner_up, s) if self.runner_up else None}


def plan_cluster(request: ClusterRequest) -> ClusterPlan:
    from ...hardware import load_profile
    from .search import choose, predict_all
    from ...workloads.model_shapes import load_shape

    profile = load_profile(request.hardware)
    if not request.model_config:
        raise UsageError("--hardware plans a model by its shape: give --model-config llama3-8b (or llama3-70b, "
                         "llama3-405b, or a transformers config.json)")
    shape = load_shape(request.model_config)
    gpn = request.gpus_per_node or profile.gpus_per_node
    gpus = request.gpus or gpn
    if gpus > gpn and gpus % gpn:
        raise UsageError(f"--gpus {gpus} is not a whole number of nodes of {gpn} GPUs (--gpus-per-node)")
    if request.seq_len < 2:
        raise UsageError(f"--seq-len {request.seq_len}: a language model learns each token from those before it; "
                         "give --seq-len 2 or more (e.g. --seq-len 8192)")
    if request.seq_len > shape.max_positions:
        raise UsageError(f"--seq-len {request.seq_len} is longer than {shape.name}'s {shape.max_positions} "
                         f"positions (max_position_embeddings); give --seq-len {shape.max_positions} or less")
    scenario = ClusterScenario(shape, profile, gpus, min(gpn, gpus), request.seq_len, request.global_batch or 2 * gpus,
                        request.model_config)
    fixed = request.fixed
    if fixed.strategy is not None and fixed.strategy not in STRATEGIES:
        raise UsageError(f"--strategy {fixed.strategy}: a cluster plan takes one of {', '.join(STRATEGIES)}")
    if fixed.float8 and not profile.peak("fp8"):
        raise UsageError(f"--float8: {profile.name} has no float8 tensor cores; drop --float8")
    check_strategy(fixed, gpus)
    check_software(fixed.software, profile)
    predictions = predict_all(scenario, fixed)
    best, runner_up = choose(predictions)
    return ClusterPlan(scenario, predictions, best, runner_up)


def check_strategy(fixed: Fixed, gpus: int) -> None:
    """A --strategy with degrees `scaletrain train` does not take with it is refused in train's
    own words (--strategy ddp --cp 2, say), not answered with another strategy."""
    from ...strategies import get_strategy
    from .search import TRAIN_STRATEGY

    if fixed.strategy is None:
        return
    degrees = {name: getattr(fixed, name) for name in ("tp", "pp", "cp", "dp_shard", "dp_replicate")
               if getattr(fixed, name)}
    try:
        get_strategy(TRAIN_STRATEGY[fixed.strategy], **degrees).check_world_size(gpus)
    except UsageError as exc:
        raise UsageError(f"{exc.raw} (as scaletrain train would refuse it)") from None


def check_software(software, profile) -> None:
    """An attention kernel with no published rates on this GPU's architecture (FlashAttention-3
    and cuDNN's on an A100, say) is refused."""
    from ...hardware.kernels import kernels

    kernel = software.attention_kernel(profile)
    if kernel in ("calibrated", "sdpa-math") or not profile.architecture:
        return
    if kernel not in kernels(profile.architecture):
        raise UsageError(f"--attention {software.attention}: no published rates of {kernel} on {profile.name} "
                         f"({profile.architecture}); give one of {', '.join(kernels(profile.architecture))}, sdpa "
                         "or sdpa-math")
