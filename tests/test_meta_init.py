"""Meta-device initialisation equals an ordinary build, or is not used: the check that tells
(a replay of the modules' initialisation, recorded on the meta device, against the recorded
build) agrees with the weights really materialised; the trainer's default build under fsdp,
tp and pipeline trains exactly as `--meta-init never` on a model with a computed buffer,
constructor-time init and tied weights; a model built on the meta device trains under ddp."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import scaletrain
from scaletrain.foundation.errors import UsageError
from scaletrain.parallel.init_trace import recording
from scaletrain.parallel.meta_check import replay_difference
from scaletrain.parallel.meta_init import materialise
from tests.helpers import REPO, torchrun
from tests.workers import meta_init_models as models


class Orthogonal(nn.Module):  # torch.nn.init.orthogonal_ does nothing on the meta device: recorded all the same
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        nn.init.orthogonal_(self.proj.weight)


class TiedLast(nn.Module):  # the second module's weight kept: what a replay in module order gives too
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4, bias=False)
        self.second = nn.Linear(4, 4, bias=False)
        self.first.weight = self.second.weight


def _llama(tied: bool) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                        tie_word_embeddings=tied))


CASES = {  # factory: what the check must say (None: the replay is an ordinary build)
    "digits CNN with batch norm and an embedding": (
        lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.LayerNorm(4), nn.Embedding(5, 4, padding_idx=0)),
        None),
    "a computed buffer": (lambda: models.MaskedLinear(4, 4), "buffer 'mask' is computed in the constructor"),
    "orthogonal_ in the constructor": (Orthogonal, "'proj.weight' is set in the constructor (torch.nn.init.orthogonal"),
    "constant_ and zeros_ in the constructor": (lambda: models.Block(4), "is set in the constructor"),
    "weights tied to the first module's": (lambda: models.Tied(4), "is tied to"),
    "weights tied to the last module's": (TiedLast, None),
    "a Hugging Face Llama": (lambda: _llama(False), None),
    "a Hugging Face Llama with tied embeddings": (lambda: _llama(True), "is tied to"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_check_agrees_with_the_weights_materialised(case):
    factory, expected = CASES[case]
    torch.manual_seed(7)
    ordinary = factory().state_dict()
    torch.manual_seed(7)
    start = torch.get_rng_state()
    with torch.device("meta"), recording() as built:
        model = factory()
    said = replay_difference(model, built)
    materialise(model, model, torch.device("cpu"), start)
    same = all(torch.equal(value, model.state_dict()[name]) for name, value in ordinary.items())
    assert same == (expected is None), (case, said)
    if expected is None:
        assert said is None, said
    else:
        assert expected in said, said


def test_the_library_refuses_a_meta_build_it_cannot_reproduce_and_keeps_ties():
    with scaletrain.init("single", environ={}) as run:
        with run.meta_device():
            model = models.model()
        with pytest.raises(UsageError, match=r"would not start from the weights of an ordinary build: .*build it on a "
                                             r"real device .* or pass init_fn"):
            run.setup(model)
        with run.meta_device():
            model = nn.Sequential(TiedLast(), nn.Linear(4, 2))
        ready = run.unwrap(run.setup(model))
        assert ready[0].first.weight is ready[0].second.weight  # still one tensor after materialising


@pytest.mark.timeout(240)
def test_default_build_trains_as_an_ordinary_one_and_meta_builds_train_under_ddp():
    done = torchrun(REPO / "tests" / "workers" / "meta_init_exact.py", nproc=2, timeout=200)
    assert done.returncode == 0, f"worker failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    found = {(r["strategy"], r["meta_init"]): r for r in
             (json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("RESULT "))}
    for strategy in ("fsdp", "tp", "pipeline"):
        # The held-out loss of the default build is exactly that of an ordinary one.
        assert found[(strategy, "auto")]["loss"] == found[(strategy, "never")]["loss"], strategy
    assert done.stdout.count("meta-device initialisation not used: '1.up.weight' is set in the constructor") == 3
    assert found[("ddp", "always")]["loss"] == found[("ddp", "never")]["loss"]
    assert found[("ddp", "library")]["same_start"]
