"""float8's decisions, made on the CPU (float8 itself needs a GPU with float8 hardware, where
scripts/gpu-proof.sh measures it): which layers compute in float8 (torchao's filter for its
recipe, never the output head), when FSDP all-gathers in float8 and the scales are computed
after each optimizer step (only where parameters are sharded), that float8 compiles, and its
one-line refusal where torch.compile cannot run."""

from __future__ import annotations

import pytest
import torch
from torch import nn


def _config(world_size: int, **options):
    from scaletrain.strategies import get_strategy

    return get_strategy("fsdp", precision="float8", **options).configuration(world_size)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.big = nn.Linear(4096, 4096)  # tensorwise: large enough to gain
        self.wide = nn.Linear(1024, 8192)
        self.small = nn.Linear(1024, 1024)  # K <= 4096 and N <= 1024: stays bf16
        self.odd = nn.Linear(4096, 4100)  # not a multiple of 16
        self.lm_head = nn.Linear(4096, 32768)  # the output head: never


def test_which_layers_compute_in_float8():
    from scaletrain.parallel.float8 import converts

    with torch.device("meta"):
        model = Model()
    chosen = {name for name, module in model.named_modules() if converts(module, name)}
    assert chosen == {"big", "wide"}


@pytest.mark.parametrize("world_size,options,gathered", [(2, {}, True), (1, {}, False), (1, {"one_shard": "fsdp"}, False)],
                         ids=["two shards", "one process", "one shard under FSDP"])
def test_float8_all_gather_and_precomputed_scales_only_where_sharded(world_size, options, gathered):
    from scaletrain.parallel import ModelPart
    from scaletrain.parallel.compile import Compile
    from scaletrain.parallel.float8 import Float8Training, gathers_in_float8

    config = _config(world_size, **options)
    assert gathers_in_float8(config) is gathered
    with torch.device("meta"):
        model = Model()
    part = ModelPart(module=model, model=model)
    Float8Training().apply(part, config, None)
    converted = {name: m for name, m in model.named_modules() if type(m).__name__ == "Float8Linear"}
    assert set(converted) == {"big", "wide"}
    assert all(m.config.enable_fsdp_float8_all_gather is gathered for m in converted.values())
    assert len(part.after_optimizer_step) == (1 if gathered else 0)  # the scales, after each optimizer step
    assert Compile().enabled(config)  # float8 runs compiled, compile given or not


def test_float8_without_torch_compile_is_refused_in_one_line():
    from scaletrain.parallel.float8 import float8_problem

    problem = float8_problem("cuda", (9, 0), "NVIDIA H100 80GB HBM3",
                             compiles="Triton, which torch.compile needs for CUDA, is not installed")
    assert "torch.compile cannot run here" in problem and "precision" in problem and "\n" not in problem
    assert float8_problem("cuda", (9, 0), "NVIDIA H100 80GB HBM3", compiles=None) is None
