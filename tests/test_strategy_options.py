"""Impossible strategy combinations fail before any process starts: one line naming the
fix, exit status 2, no traceback, no output folder. Plus the split planner itself."""

from __future__ import annotations

import pytest
from torch import nn

from scaletrain.cli import main
from scaletrain.foundation.errors import UsageError
from scaletrain.strategies import get_strategy
from scaletrain.parallel.splitting import balanced_cuts, cut_blocks
from scaletrain.workloads.models import cifar_cnn, digits_cnn
from tests.helpers import scaletrain

IMPOSSIBLE = [
    # (flags, words the one line must contain)
    (["--strategy", "pipeline", "--nproc-per-node", "3", "--pipeline-stages", "2"], "does not divide the 3 processes"),
    (["--strategy", "pipeline", "--nproc-per-node", "5", "--pipeline-stages", "5"], "only 4 blocks"),
    (["--strategy", "pipeline", "--nproc-per-node", "2", "--microbatches", "3"], "--microbatches 4"),
    (["--strategy", "pipeline", "--nproc-per-node", "2", "--microbatches", "1", "--schedule", "1f1b"],
     "--schedule gpipe"),
    (["--strategy", "pipeline", "--nproc-per-node", "2", "--split-points", "conv2,fc1"], "makes 3 stages"),
    (["--strategy", "mp", "--devices-per-process", "5"], "--devices-per-process 4 or fewer"),
    (["--strategy", "hybrid", "--nproc-per-node", "2", "--devices-per-process", "9"], "only 4 blocks"),
    (["--strategy", "mp", "--split-points", "conv9"], "no block named 'conv9'"),
    (["--strategy", "mp", "--split-points", "fc1,conv2"], "in model order"),
    (["--strategy", "mp", "--microbatches", "64"], "more than the batch of 32"),
    (["--strategy", "mp", "--nproc-per-node", "2"], "runs one process"),
    (["--strategy", "dp", "--devices-per-process", "2", "--device", "cpu"], "no GPU"),
    (["--strategy", "ddp", "--nproc-per-node", "2", "--microbatches", "2"], "--microbatches 2 does not apply"),
    (["--strategy", "fsdp", "--nproc-per-node", "2", "--pipeline-stages", "2"], "does not apply to --strategy fsdp"),
    (["--strategy", "single", "--schedule", "gpipe"], "--schedule gpipe does not apply"),
]


@pytest.mark.parametrize("flags,expected", IMPOSSIBLE, ids=[" ".join(f) for f, _ in IMPOSSIBLE])
def test_impossible_combinations_fail_in_one_line(flags, expected, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("scaletrain: error: "), err
    assert expected in err, err
    assert not out.exists()  # nothing half-written


def test_the_command_exits_2_with_one_line(tmp_path):
    done = scaletrain("train", "--strategy", "pipeline", "--nproc-per-node", "3", "--out", str(tmp_path / "r"),
                      timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr, done.stderr


def test_library_errors_name_the_library_arguments():
    with pytest.raises(UsageError, match="microbatches=2 does not apply to strategy='ddp'"):
        get_strategy("ddp", microbatches=2)
    with pytest.raises(UsageError, match="precision='fp8': choose one of fp32, bf16, fp16"):
        get_strategy("ddp", precision="fp8")
    with pytest.raises(UsageError, match="grad_accum=0"):
        get_strategy("fsdp", grad_accum=0)
    with pytest.raises(UsageError) as refused:
        get_strategy("pipeline", microbatches=3).check_model(2, None, 32)
    assert str(refused.value).startswith("microbatches=3 does not divide the batch of 32; use microbatches=4")
    assert "--" not in str(refused.value)


def test_each_strategy_declares_its_options_once_and_the_flags_come_from_there():
    from dataclasses import fields

    from scaletrain.cli import build_parser
    from scaletrain.strategies import REGISTRY

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = {a.dest: a for a in train._actions}
    for cls in REGISTRY.values():
        for f in fields(cls.Options):
            if f.metadata.get("command_line", True):
                assert f.name in flags, f"{cls.name}.{f.name} has no flag"
                assert cls.name in flags[f.name].help or "every strategy" in flags[f.name].help


def test_balanced_cuts_minimise_the_heaviest_part():
    assert balanced_cuts([1, 1, 1, 1], 2) == [0, 2]
    assert balanced_cuts([10, 1, 1, 10], 2) == [0, 2]
    assert balanced_cuts([1, 100, 1, 1], 3) == [0, 1, 2]
    assert balanced_cuts([5], 1) == [0]


def test_automatic_split_balances_parameters_and_keeps_order():
    # cifar_cnn: conv1 ~0.9k, conv2 ~18k, fc1 ~2.1M, fc2 ~5k parameters: fc1 alone is the heavy part.
    assert cut_blocks(cifar_cnn(), 2, None, "mp", "--devices-per-process") == [["conv1", "conv2"], ["fc1", "fc2"]]
    assert cut_blocks(digits_cnn(), 4, None, "mp", "-K") == [["conv1"], ["conv2"], ["fc1"], ["fc2"]]
    assert cut_blocks(digits_cnn(), None, ["fc1"], "mp", "-K") == [["conv1", "conv2"], ["fc1", "fc2"]]


def test_only_sequential_models_can_be_split():
    class Custom(nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(UsageError, match="nn.Sequential"):
        cut_blocks(Custom(), 2, None, "--strategy mp", "--devices-per-process")


@pytest.mark.parametrize("name", ["single", "dp", "mp", "pipeline", "ddp", "hybrid", "fsdp"])
def test_describe_works_before_setup(name):
    """The plan's facts come from the strategy alone; per-run facts join once a model is set up."""
    import scaletrain

    with scaletrain.init(strategy=name, environ={}) as run:
        facts = run.describe()
    assert facts["strategy"] == name and facts["precision"] == "fp32" and "memory_per_process" not in facts


def test_a_tensor_parallel_plan_without_tensor_parallel_is_refused():
    """--parallelize with no --tp was silently ignored."""
    from scaletrain.foundation.errors import as_flags
    from scaletrain.strategies import get_strategy

    with pytest.raises(UsageError) as refused:
        get_strategy("fsdp", parallelize="mymodule:plan").check_world_size(2)
    assert as_flags(refused.value.raw) == ("--parallelize is a tensor-parallel plan, but this run has no tensor "
                                           "parallel (tp 1): give --tp 2 or more, or leave --parallelize out")
    get_strategy("tp", parallelize="mymodule:plan").check_world_size(2)  # tp takes the processes: a plan applies


def test_a_refusal_tells_each_door_its_own_fix():
    """The library gets `init_fn=` for run.setup; the command line gets its flag (it was told
    to "pass init_fn=fn(module) to run.setup")."""
    from scaletrain.foundation.errors import arg, as_flags, by_door

    error = UsageError("no reset_parameters(); " + by_door("pass init_fn=fn(module) to run.setup",
                                                           f"build it whole: {arg('meta_init', 'never')}"))
    assert str(error) == "no reset_parameters(); pass init_fn=fn(module) to run.setup"
    assert as_flags(error.raw) == "no reset_parameters(); build it whole: --meta-init never"
    assert error.for_command_line({"meta_init": "--meta-init"}) == as_flags(error.raw)


def test_reshard_after_forward_reaches_fsdp_in_the_form_it_takes_without_a_warning():
    """1 (sharded one way: the whole parameter kept) warned once per rank as an int."""
    from scaletrain.parallel.data_parallel import torch_reshard

    assert torch_reshard(1, 4) is False and torch_reshard(4, 4) is True and torch_reshard(2, 4) == 2
    assert torch_reshard(True, 4) is True and torch_reshard(False, 4) is False
