"""Models larger than one process: activation checkpointing leaves losses and gradients as they
were; a meta-device build that nothing could initialise, CPU offload on a CPU and mistaken
checkpointing options are refused in one line; the plan's memory parts add up."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import scaletrain
from scaletrain.foundation.errors import UsageError
from tests.helpers import in_process
from tests.workers.composition_reference import batches, gpt, loss_fn, optimizer_for

MODES = [{}, {"activation_checkpointing": "full"}, {"activation_checkpointing": "selective"},
         {"activation_checkpointing": "selective", "ac_every": 2}]


def _train(options: dict) -> tuple[list[float], dict, dict]:
    with scaletrain.init("single", environ={}, **options) as run:
        model = gpt()
        model, opt = run.setup(model, optimizer_for(model))
        losses = [run.train_step(model, opt, x, y, loss_fn=loss_fn).item() for x, y in batches()]
        return losses, {n: p.detach().clone() for n, p in run.unwrap(model).named_parameters()}, run.describe()


def test_activation_checkpointing_changes_no_loss_and_no_gradient():
    reference, params, _ = _train({})
    for options in MODES[1:]:
        losses, mine, facts = _train(options)
        assert losses == pytest.approx(reference, abs=1e-6), options
        assert all(torch.allclose(mine[n], params[n], atol=1e-6) for n in params), options
        chosen = facts["activation_checkpointing"]
        assert chosen["mode"] == options["activation_checkpointing"]
        # every block (the embedding, 2 transformer blocks, the head), or every second one
        assert len(chosen["blocks"]) == (2 if options.get("ac_every") else 4), chosen


class NoInit(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))  # set in __init__, with no reset_parameters()

    def forward(self, x):
        return x * self.scale


def test_a_meta_build_nothing_can_initialise_is_refused():
    with scaletrain.init("single", environ={}) as run:
        with run.meta_device():
            model = nn.Sequential(nn.Linear(4, 4), NoInit())
        with pytest.raises(UsageError, match="has tensors of its own and no reset_parameters"):
            run.setup(model)
        with run.meta_device():
            model = nn.Sequential(nn.Linear(4, 4), NoInit())
        prepared = run.setup(model, init_fn=lambda m: m.scale.fill_(2.0) if isinstance(m, NoInit) else None)
        assert torch.equal(run.unwrap(prepared)[1].scale, torch.full((4,), 2.0))


@pytest.mark.parametrize("flags,words", [
    (["--strategy", "fsdp", "--offload"], "--offload moves FSDP's parameters"),
    (["--ac-every", "2"], "--ac-every 2 chooses blocks for --activation-checkpointing selective"),
    (["--strategy", "fsdp", "--reshard-after-forward", "sometimes"], "--reshard-after-forward"),
    (["--strategy", "fsdp", "--nproc-per-node", "2", "--reshard-after-forward", "3"], "must divide dp_shard"),
])
def test_memory_options_refused_in_one_line(flags, words, tmp_path, capsys):
    out = tmp_path / "run"
    code, _out, err = in_process(capsys, "train", *flags, "--device", "cpu", "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_plan_memory_counts_shares_checkpointing_and_fsdp_gathers():
    """The parts of a predicted peak, from a hand-made probe: fsdp holds half the states of ddp
    plus its gathered blocks; checkpointing lowers activations; resharding off keeps more."""
    from tests.test_measure_cost_models import probe as hand_probe

    from scaletrain.plan.configuration import configuration
    from scaletrain.plan.costs.activation_checkpointing import RECOMPUTE_HEIGHT
    from scaletrain.plan.costs.data_parallel import FSDP_GATHERED_BLOCKS
    from scaletrain.plan.costs.memory import in_use, peak_bytes

    from dataclasses import replace

    p = hand_probe()
    fp = replace(p.footprint, block_activation_bytes_per_sample=(100.0, 300.0, 400.0, 200.0),
                 checkpointed_activation_bytes_per_sample={"full": 250.0, "selective": 600.0},
                 largest_tensor_bytes=4_000_000)
    p = replace(p, footprint=fp, memory_constant_bytes=300e6)
    ddp, fsdp = configuration("ddp", 2), configuration("fsdp", 2)
    units = [0, 1, 2, 3]
    assert in_use(p, ddp, units, 1.0, 1.0, 4e6)["optimizer_state"] == pytest.approx(16e6)
    assert in_use(p, fsdp, units, 1.0, 1.0, 4e6)["optimizer_state"] == pytest.approx(8e6)
    assert in_use(p, fsdp, units, 1.0, 1.0, 4e6)["transient"] == pytest.approx(FSDP_GATHERED_BLOCKS * 4e6)
    # DDP: the largest gradient before it lands in its bucket.
    assert in_use(p, ddp, units, 1.0, 1.0, 4e6)["transient"] == pytest.approx(4e6)
    full = configuration("ddp", 2, {"activation_checkpointing": "full"})
    assert in_use(p, full, units, 1.0, 1.0, 4e6)["activations"] == pytest.approx((250 + RECOMPUTE_HEIGHT * 400) * 32)
    assert in_use(p, ddp, units, 1.0, 1.0, 4e6)["activations"] == pytest.approx(1000 * 32)
    # A pipeline's first stage keeps its 2 micro-batches (the whole batch) but computes one
    # checkpointed block again for one micro-batch at a time; micro-batches' gradients are added
    # up, the largest of its tensors on the way.
    piped = configuration("pipeline", 2, {"activation_checkpointing": "full", "microbatches": 2})
    first = in_use(p, piped, [0, 1], 0.5, 1.0, 4e6, stage=0)
    assert first["activations"] == pytest.approx((250 * 400 / 1000 * 32) + RECOMPUTE_HEIGHT * 300 * 16)
    assert first["transient"] == pytest.approx(min(fp.largest_tensor_bytes, 4e6))
    keep = configuration("fsdp", 2, {"reshard_after_forward": False})
    assert peak_bytes(p, keep) > peak_bytes(p, fsdp)


def test_fsdp_configurations_take_their_slack_from_the_probes_fsdp_steps():
    """Where the probe measured FSDP's own peak (its job of several processes, first), an FSDP
    configuration predicted at that size is that peak; others keep the DDP job's slack; a
    probe without it (an older cache) predicts as before."""
    from tests.test_measure_cost_models import probe as hand_probe

    from scaletrain.plan.configuration import configuration
    from scaletrain.plan.costs.memory import peak_bytes

    from dataclasses import replace

    plain = replace(hand_probe(), memory_constant_bytes=300e6, memory_peak_bytes=400e6)
    p = replace(plain, fsdp_peak_above_bytes=150e6, fsdp_peak_world_size=2)
    fsdp2, fsdp4, ddp = configuration("fsdp", 2), configuration("fsdp", 4), configuration("ddp", 2)
    assert peak_bytes(p, fsdp2) == pytest.approx(300e6 + 150e6)
    assert peak_bytes(p, fsdp2) > peak_bytes(plain, fsdp2)
    # Four shards hold less than two by the states' difference; the slack is the same.
    states = (8 + 8 + 16) * 1e6
    assert peak_bytes(p, fsdp2) - peak_bytes(p, fsdp4) == pytest.approx(states / 2 - states / 4)
    assert peak_bytes(p, ddp) == peak_bytes(plain, ddp)
    hsdp = configuration("fsdp", 4, {"dp_replicate": 2})
    assert peak_bytes(p, hsdp) == pytest.approx(peak_bytes(p, fsdp2))


def test_library_auto_shards_only_what_does_not_fit():
    from scaletrain.strategies.auto import data_parallel_for

    assert data_parallel_for(100, 200, 4) == "ddp" and data_parallel_for(300, 200, 4) == "fsdp"
    assert data_parallel_for(300, 200, 1) == "ddp"  # one process: nothing to shard over
    with scaletrain.init("auto", environ={}) as run:
        model = run.setup(nn.Linear(4, 2))
        assert run.describe()["strategy"] == "auto" and run.describe()["mesh"] == "1 process"
        assert run.unwrap(model).weight.shape == (2, 4)


def test_live_bytes_count_the_tensors_alive_at_once():
    from scaletrain.measure.live_bytes import LiveBytes

    with LiveBytes() as live:
        a = torch.ones(1000)           # 4,000 bytes
        b = torch.ones(2000)           # 8,000: 12,000 alive
        del a
        c = torch.ones(500) + 1        # a temporary of 2,000 and its sum: 12,000 again at most
        a_view = b[:10]                # a view is no new memory
    assert live.peak == 12_000 and live.now == 8_000 + 2_000
    del b, c, a_view


def test_recompute_height_is_measured_and_leaves_the_model_as_it_was():
    """Backward's height over a checkpointed block, from live tensors with and without
    checkpointing: positive for a transformer, and no block keeps a checkpointed forward."""
    from scaletrain.measure.footprint import _saved_by_unit, checkpointed_activations, model_units, recompute_height

    model = gpt()
    x, y = batches(1)[0]
    runs, _ = model_units(model)
    per_unit = _saved_by_unit(model, runs, x, y, loss_fn)
    kept = checkpointed_activations(model, runs, x, per_unit)["full"] * len(x)
    height = recompute_height(model, x, y, loss_fn, per_unit, kept)
    assert 0.3 < height < 4, height
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_a_pipeline_step_keeps_no_outputs_of_its_last_stage():
    """Training reads a pipeline's losses only; a schedule that kept every micro-batch's output
    (and joined them) held the logits twice over on a language model's last stage."""
    import inspect

    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    from scaletrain.parallel.pipeline import _without_outputs

    if "return_outputs" in inspect.signature(PipelineScheduleSingle.step).parameters:
        assert _without_outputs() == {"return_outputs": False}
    else:
        assert _without_outputs() == {}
