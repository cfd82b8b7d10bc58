"""The parallel dimensions as pure values: degrees that multiply to the world size, the rank
layout on the mesh, the strategy a command line's degrees imply, and one line naming every
factor when they do not fit."""

from __future__ import annotations

import pytest

from scaletrain.bench.spec import option_flags
from scaletrain.foundation.errors import UsageError
from scaletrain.parallel.dims import ParallelDims, resolve_dims
from scaletrain.plan.choose import candidates
from scaletrain.plan.configuration import configuration
from scaletrain.strategies import get_strategy, implied_strategy


def test_the_filling_degree_takes_what_the_others_leave():
    assert resolve_dims(8, {"tp": 2}, "dp_shard") == ParallelDims(dp_shard=4, tp=2)
    assert resolve_dims(8, {"pp": 2, "dp_shard": 2, "tp": 2}, None) == ParallelDims(pp=2, dp_shard=2, tp=2)
    assert get_strategy("fsdp", tp=2).dims(4) == ParallelDims(dp_shard=2, tp=2)
    assert get_strategy("fsdp", dp_replicate=2).dims(4) == ParallelDims(dp_replicate=2, dp_shard=2)
    assert get_strategy("tp").dims(4) == ParallelDims(tp=4)
    assert get_strategy("tp", tp=2).dims(4) == ParallelDims(dp_replicate=2, tp=2)
    assert get_strategy("pipeline").dims(4) == ParallelDims(pp=4)
    assert get_strategy("pipeline", pipeline_stages=2).dims(4) == ParallelDims(pp=2, dp_replicate=2)


def test_ranks_lie_with_tensor_parallel_innermost_and_stages_outermost():
    dims = ParallelDims(pp=2, dp_shard=2, tp=2)
    assert [dims.coordinates(r)["tp"] for r in range(8)] == [0, 1] * 4
    assert [dims.coordinates(r)["pp"] for r in range(8)] == [0] * 4 + [1] * 4
    assert [dims.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]  # tp peers and stages: the same batch
    assert dims.describe() == "pp 2 × dp_shard 2 × tp 2" and ParallelDims().describe() == "1 process"


@pytest.mark.parametrize("strategy,options,world,words", [
    ("pipeline", {"pp": 2, "dp_shard": 2, "tp": 2}, 4, "pp=2 × dp_shard=2 × tp=2 = 8 needs 8 processes"),
    ("fsdp", {"tp": 3}, 8, "tp=3 does not divide the 8 processes that dp_shard would share out"),
    ("fsdp", {"tp": 3}, 8, "or tp=2"),
    ("pipeline", {"pipeline_stages": 2}, 3, "pipeline_stages=2 does not divide the 3 processes"),
    ("single", {}, 2, "runs one process"),
])
def test_degrees_that_do_not_fit_are_one_line_naming_every_factor(strategy, options, world, words):
    with pytest.raises(UsageError) as refused:
        get_strategy(strategy, **options).check_world_size(world)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_degree_a_strategy_does_not_take_names_the_one_that_does():
    with pytest.raises(UsageError, match="tp=2 does not apply to strategy='ddp'; use strategy='tp'"):
        get_strategy("ddp", tp=2)
    with pytest.raises(UsageError, match="pp=2 does not apply to strategy='fsdp'; use strategy='pipeline'"):
        get_strategy("fsdp", pp=2)


def test_degrees_alone_imply_the_strategy():
    assert implied_strategy({"pp": 2, "dp_shard": 2, "tp": 2}) == "pipeline"
    assert implied_strategy({"dp_replicate": 2}) == "fsdp" and implied_strategy({"tp": 2}) == "tp"
    assert implied_strategy({}) == "ddp"


def test_configurations_and_candidates():
    assert configuration("fsdp", 4, {"tp": 2}).label == "fsdp ×4 (dp_shard 2 × tp 2)"
    assert configuration("fsdp", 3, {"tp": 2}) is None  # does not fit: no configuration
    assert configuration("pipeline", 2).microbatches == 2  # the strategy's own default: one per stage
    found = candidates(4, 32, 4, tensor_parallel=True)
    assert ("fsdp", {"tp": 2}) in found and ("tp", {"tp": 4, "activation_checkpointing": "full"}) in found
    assert ("pipeline", {"pp": 2, "microbatches": 8, "dp_shard": 2}) in found
    assert not any(name == "tp" for name, _ in candidates(4, 32, 4, tensor_parallel=False))


def test_options_travel_as_the_flags_that_give_them():
    assert option_flags({"microbatches": 8, "compile": True, "offload": False, "reshard_after_forward": False,
                         "split_points": ("fc2", "fc3")}) == [
        "--microbatches", "8", "--compile", "--reshard-after-forward", "false", "--split-points", "fc2,fc3"]
