"""The configurations a cluster plan predicts, and the choice among them.

Every combination of the degrees the user left open — tensor parallel inside a node, pipeline
stages (1F1B and interleaved), context parallel for long sequences, FSDP or HSDP (or DDP) for
the data-parallel rest, and for a mixture of experts every expert-parallel degree that divides
both the experts and dp_shard × cp — × micro-batches × activation checkpointing, each checked
(`config.check`) and predicted (`step.predict`). `choose` takes the fastest that fits and
`scaletrain train` runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ...foundation.errors import UsageError, arg
from ...parallel.dims import ParallelDims
from .config import CHECKPOINTING, ClusterConfig, ClusterScenario, check
from .prediction import ClusterPrediction
from .runnable import train_refusal
from .software import Software
from .step import predict

MICROBATCHES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Fixed:
    """What the user fixed (None: open)."""
    strategy: Optional[str] = None  # fsdp, hsdp, ddp, tp, pipeline
    tp: Optional[int] = None
    pp: Optional[int] = None
    cp: Optional[int] = None
    dp_shard: Optional[int] = None
    dp_replicate: Optional[int] = None
    ep: Optional[int] = None
    microbatch: Optional[int] = None
    checkpointing: Optional[str] = None
    schedule: Optional[str] = None
    float8: bool = False
    software: Software = Software()  # what the run uses: torch, attention, loss, compile, ...
    options: tuple = ()  # (field, value) pairs of ClusterConfig every candidate takes (async_tp, ...)
    also: tuple = ()  # configurations predicted besides the search's (a published run's, say)


@dataclass(frozen=True)
class StrategyLayout:
    """What a cluster plan's --strategy fixes of the search."""
    pipelined: Optional[bool]
    """Pipeline stages searched (None), at least two (True) or none (False), where --pp is not given."""
    splits: tuple
    """The splits of the data-parallel degree tried: sharded (FSDP over all of it), hybrid (HSDP:
    sharded within a node, replicated across), replicated (DDP)."""


#: The layouts a cluster plan takes as --strategy (None: the search's own, every layout).
LAYOUTS = {
    None: StrategyLayout(None, ("sharded", "hybrid")),
    "fsdp": StrategyLayout(False, ("sharded",)),
    "hsdp": StrategyLayout(False, ("hybrid",)),
    "ddp": StrategyLayout(False, ("replicated",)),
    "tp": StrategyLayout(False, ("replicated",)),
    "pipeline": StrategyLayout(True, ("sharded",)),
}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(scenario: ClusterScenario, fixed: Fixed) -> list[ClusterConfig]:
    s, gpus, gpn = scenario.shape, scenario.gpus, scenario.gpus_per_node
    given = {name: value for name, value in (("tp", fixed.tp), ("pp", fixed.pp), ("cp", fixed.cp),
                                             ("dp_shard", fixed.dp_shard), ("dp_replicate", fixed.dp_replicate))
             if value}
    product = 1
    for value in given.values():
        product *= value
    if gpus % product:
        named = " × ".join(f"{arg(name, value)}" for name, value in given.items())
        what = f"{named} does not divide" if len(given) == 1 else f"{named} = {product} do not divide"
        raise UsageError(f"{what} {arg('gpus', gpus)}: choose degrees whose product divides the GPUs")
    tps = [fixed.tp] if fixed.tp else [t for t in (1, 2, 4, 8) if t <= gpn and s.heads % t == 0 and s.ffn % t == 0
                                       and s.vocab % t == 0 and gpus % t == 0]
    if not fixed.tp and fixed.strategy in ("ddp", "tp"):  # ddp has no tensor parallel; tp has
        tps = [t for t in tps if (t > 1) == (fixed.strategy == "tp")]
    pps = [fixed.pp] if fixed.pp else [p for p in (1, 2, 4, 8, 16) if p <= s.layers and gpus % p == 0]
    pipelined = LAYOUTS[fixed.strategy].pipelined
    if pipelined is not None and not fixed.pp:
        pps = [p for p in pps if p > 1] if pipelined else [1]
    # Context parallel where a sequence is long (its ring is worth it from 16k tokens) or asked for.
    cps = [fixed.cp] if fixed.cp else [c for c in (1, 2, 4, 8) if c == 1 or scenario.seq >= 16384 * c // 2]
    if not fixed.cp and fixed.strategy in ("ddp", "pipeline"):  # neither takes context parallel in train
        cps = [1]
    acs = [fixed.checkpointing] if fixed.checkpointing else list(CHECKPOINTING)
    out = []
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                for replicate, shard in _data_parallel(dp, tp * cp, gpn, fixed):
                    for ep in _expert_parallel(s, shard * cp, fixed):
                        for mb in ([fixed.microbatch] if fixed.microbatch else MICROBATCHES):
                            if scenario.global_batch % (dp * mb):
                                continue
                            for ac in acs:
                                for schedule, v in _schedules(pp, s.layers, fixed):
                                    dims = ParallelDims(pp=pp, dp_replicate=replicate, dp_shard=shard, cp=cp, ep=ep,
                                                        tp=tp)
                                    out.append(replace(ClusterConfig(dims, mb, ac, fixed.float8, schedule, v,
                                                                     software=fixed.software), **dict(fixed.options)))
    return out + [c for c in fixed.also if c not in out]


def _expert_parallel(shape, lent: int, fixed: Fixed) -> list[int]:
    """Expert-parallel degrees: --ep's (checked by `config.check`), else for a mixture of
    experts every degree dividing both its experts and the dp_shard × cp GPUs it borrows (1:
    FSDP gathers every expert); none for a dense model."""
    if fixed.ep:
        return [fixed.ep]
    return [e for e in range(1, lent + 1) if lent % e == 0 and shape.experts % e == 0] if shape.experts else [1]


def _data_parallel(dp: int, inner: int, gpn: int, fixed: Fixed) -> list[tuple[int, int]]:
    """(replicate, shard) splits of the data-parallel degree: FSDP over all of it, HSDP sharded
    within a node and replicated across, or DDP (replicated)."""
    if fixed.dp_shard or fixed.dp_replicate:
        shard = fixed.dp_shard or dp // (fixed.dp_replicate or 1)
        replicate = fixed.dp_replicate or dp // shard
        return [(replicate, shard)] if replicate * shard == dp else []
    splits = LAYOUTS[fixed.strategy].splits
    within = max(1, gpn // inner)
    options = {(1, dp)} if "sharded" in splits else set()
    if "hybrid" in splits and 1 < within < dp and dp % within == 0:
        options.add((dp // within, within))
    if "replicated" in splits:
        options.add((dp, 1))
    return sorted(options)


def _schedules(pp: int, layers: int, fixed: Fixed) -> list[tuple[str, int]]:
    if pp == 1:
        return [("1f1b", 1)]
    out = [] if fixed.schedule == "interleaved" else [("1f1b", 1)]
    if fixed.schedule != "1f1b" and layers >= 2 * pp:
        out.append(("interleaved", 2))
    return out


#: The `scaletrain train` strategy each --strategy of a cluster plan means (hsdp: fsdp with --dp-replicate).
TRAIN_STRATEGY = {"fsdp": "fsdp", "hsdp": "fsdp", "ddp": "ddp", "tp": "tp", "pipeline": "pipeline"}


def predict_all(scenario: ClusterScenario, fixed: Fixed) -> list[ClusterPrediction]:
    configs = candidates(scenario, fixed)
    if fixed.strategy is not None:  # the layouts --strategy names, as train runs them
        configs = [c for c in configs if c.strategy == TRAIN_STRATEGY[fixed.strategy]]
    if not configs:
        raise UsageError(_nothing(scenario, fixed))
    results, last_error = [], None
    for config in configs:
        try:
            check(config, scenario)
        except UsageError as exc:
            last_error = exc
            continue
        prediction = predict(config, scenario)
        prediction.runnable = train_refusal(config, prediction.microbatches, scenario.shape)
        results.append(prediction)
    if not results:
        raise last_error  # the one line of what is wrong with the configuration the flags pin
    return sorted(results, key=lambda r: -r.tokens_per_second_per_gpu)


def _nothing(scenario: ClusterScenario, fixed: Fixed) -> str:
    return (f"no configuration of {scenario.gpus} GPUs makes a global batch of {scenario.global_batch} sequences "
            "with these degrees and micro-batch: give --global-batch as a multiple of the data-parallel degree × "
            "--micro-batch, or other degrees")


def choose(predictions: list[ClusterPrediction]) -> tuple[Optional[ClusterPrediction], Optional[ClusterPrediction]]:
    """The fastest configuration that fits and `scaletrain train` runs, and the runner-up."""
    fitting = [p for p in predictions if p.fits and not p.runnable]
    return (fitting[0] if fitting else None), (fitting[1] if len(fitting) > 1 else None)

