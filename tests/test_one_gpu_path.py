"""What one GPU trains fastest with, proven equal to what it replaces (on the CPU):

- fsdp with one shard and no replica trains the model as it is (autocast, fp32 parameters):
  the same parameters as one plain process after 3 steps, and the same checkpoints' keys as
  FSDP's (`one_shard="fsdp"` wraps it all the same);
- hand-written RMSNorm modules of Hugging Face's families computed by torch's fused rms_norm:
  the same outputs and gradients (float round-off), recognised by their code;
- a language model's loss a chunk of tokens at a time: transformers' own causal-LM loss and
  gradients (labels, shift_labels, num_items_in_batch, ignored positions), a lower peak on a
  32k-token vocabulary, and the model's output let go before backward;
- Python's garbage collector frozen after setup and run on a schedule, put back at the end.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

import scaletrain

torch.manual_seed(0)


def llama(vocab: int = 256, **extra):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         attn_implementation="sdpa", use_cache=False, **extra)
    return LlamaForCausalLM(config)


def _batch(vocab: int = 256, tokens: int = 16, batch: int = 2, seed: int = 1) -> dict:
    ids = torch.randint(0, vocab, (batch, tokens), generator=torch.Generator().manual_seed(seed))
    labels = ids.clone()
    labels[0, :3] = -100  # positions that do not count
    return {"input_ids": ids, "labels": labels}


def mixtral(vocab: int = 256):
    """A mixture of experts whose loss, given labels, adds its router's balance loss."""
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                           num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
                           router_aux_loss_coef=0.5, attn_implementation="sdpa", use_cache=False)
    return MixtralForCausalLM(config)


def _train(strategy: str, steps: int = 3, vocab: int = 256, build=llama, **options) -> tuple[dict, list]:
    with scaletrain.init(strategy=strategy, **options) as run:
        model = build(vocab)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, optimizer = run.setup(model, optimizer)
        losses = [float(run.train_step(model, optimizer, _batch(vocab, seed=step))) for step in range(steps)]
        state = {k: getattr(v, "full_tensor", lambda v=v: v)().detach().clone()
                 for k, v in run.unwrap(model).state_dict().items()}
        return state, losses


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_one_shard_trains_as_one_plain_process(precision):
    plain, plain_losses = _train("single", precision=precision)
    one, one_losses = _train("fsdp", precision=precision)
    assert one_losses == plain_losses
    for key in plain:
        torch.testing.assert_close(one[key], plain[key], rtol=0, atol=0, msg=key)
    if precision == "fp32":  # (in bf16 FSDP's policy computes otherwise: its residual stream is bf16)
        wrapped, _losses = _train("fsdp", precision=precision, one_shard="fsdp")
        for key in plain:
            torch.testing.assert_close(wrapped[key], plain[key], rtol=1e-5, atol=1e-6, msg=key)


def test_one_shard_checkpoints_hold_what_fsdps_do():
    states = {}
    for one_shard in ("plain", "fsdp"):
        with scaletrain.init(strategy="fsdp", one_shard=one_shard) as run:
            model = llama()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
            model, optimizer = run.setup(model, optimizer)
            run.train_step(model, optimizer, _batch())
            whole = run.prepared(model).state_dict(full=True, optimizer=optimizer)
            states[one_shard] = {part: {k: (type(v).__name__, tuple(v.shape) if hasattr(v, "shape") else None)
                                        for k, v in whole[part].items()} for part in ("model", "optimizer")}
    assert states["plain"] == states["fsdp"]


HF_NORMS = [("llama", "LlamaConfig", "LlamaRMSNorm"), ("mistral", "MistralConfig", "MistralRMSNorm"),
            ("qwen2", "Qwen2Config", "Qwen2RMSNorm"), ("qwen3", "Qwen3Config", "Qwen3RMSNorm"),
            ("gemma", "GemmaConfig", "GemmaRMSNorm")]


@pytest.mark.parametrize("family,config,norm", HF_NORMS, ids=[f for f, _c, _n in HF_NORMS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rms_norm_equals_the_models_own(family, config, norm, dtype):
    import importlib

    from scaletrain.parallel.fused_norms import form, fuse_norms

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    original = getattr(module, norm)(64, eps=1e-5)
    with torch.no_grad():
        original.weight.normal_(0.1 if family == "gemma" else 1.0, 0.2)
    fused = getattr(module, norm)(64, eps=1e-5)
    fused.load_state_dict(original.state_dict())
    assert form(fused) == ("gemma" if family == "gemma" else "llama")
    assert fuse_norms(fused) == {form(original): 1}
    original, fused = original.to(dtype), fused.to(dtype)
    x = (3 * torch.randn(4, 8, 64)).to(dtype)
    grad = torch.randn(4, 8, 64).to(dtype)
    results = []
    for norm_module in (original, fused):
        xi = x.clone().requires_grad_()
        out = norm_module(xi)
        out.backward(grad)
        results.append((out, xi.grad, norm_module.weight.grad))
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}  # bf16: one rounding apart at most
    for mine, theirs in zip(results[1], results[0]):
        assert mine.dtype == theirs.dtype
        torch.testing.assert_close(mine, theirs, **tolerance)


def test_only_known_forms_are_fused():
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

    from scaletrain.parallel.fused_norms import form

    assert form(torch.nn.RMSNorm(8)) is None and form(torch.nn.LayerNorm(8)) is None
    assert form(Olmo2RMSNorm(8)) is None  # (weight · x).to(dtype): another rounding, not replaced


def test_a_fused_model_gives_the_same_logits_and_loss():
    plain = llama()
    fused = llama()
    from scaletrain.parallel.fused_norms import fuse_norms

    assert fuse_norms(fused) == {"llama": 5}  # two per layer, and the final one
    batch = _batch()
    a, b = plain(**batch), fused(**batch)
    torch.testing.assert_close(b.logits, a.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.loss, a.loss)


def test_chunked_loss_is_transformers_loss(monkeypatch):
    from transformers.loss.loss_utils import ForCausalLMLoss

    from scaletrain.data import lm_loss

    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 7 * 50)  # chunks of 7 tokens: several, one shorter
    logits = torch.randn(3, 13, 50, dtype=torch.bfloat16)
    labels = torch.randint(0, 50, (3, 13))
    labels[1, 4:9] = -100
    shifted = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    cases = [({"labels": labels}, {}), ({"labels": labels}, {"num_items_in_batch": torch.tensor(20)}),
             ({"labels": shifted, "shift_labels": shifted}, {"num_items_in_batch": 17})]
    for given, extra in cases:
        grads = []
        for own in (True, False):
            x = logits.clone().requires_grad_()
            if own:
                loss = ForCausalLMLoss(x, vocab_size=50, **given, **extra)
            else:
                loss = lm_loss.causal_lm_loss(x, given["labels"], given.get("shift_labels"),
                                              extra.get("num_items_in_batch"), chunked=True)
            loss.backward()
            grads.append((loss.detach(), x.grad))
        torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(grads[1][1], grads[0][1])


@pytest.mark.parametrize("precision,build", [("fp32", llama), ("bf16", llama), ("fp32", mixtral)])
def test_the_models_own_loss_taken_chunked_trains_alike(monkeypatch, precision, build):
    """A Hugging Face causal LM given labels: its loss computed by scaletrain from its logits,
    chunked, equals the model's own (a mixture of experts' with its router's balance loss); the
    parameters after 3 steps too."""
    from scaletrain.data import lm_loss

    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 5 * 256)
    chunked, chunked_losses = _train("single", build=build, precision=precision, fused_norms=False)
    own, own_losses = _train("single", build=build, precision=precision, chunked_loss=False, fused_norms=False)
    torch.testing.assert_close(torch.tensor(chunked_losses), torch.tensor(own_losses), rtol=1e-5, atol=1e-5)
    # (Adam's steps of 1e-2 magnify round-off in the smallest gradients: an expert's row that
    # a token barely reached moves by up to 1e-4 on a sign of round-off)
    atol = 2e-4 if build is mixtral else 5e-5
    for key in own:
        torch.testing.assert_close(chunked[key], own[key], rtol=1e-4, atol=atol)


def _step_peak(chunked: bool, vocab: int = 32768) -> tuple[int, float]:
    from scaletrain.measure.live_bytes import LiveBytes

    with scaletrain.init(strategy="single", precision="bf16", chunked_loss=chunked, gc_every=0) as run:
        model = llama(vocab)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        model, optimizer = run.setup(model, optimizer)
        batch = _batch(vocab, tokens=256, batch=4)
        run.train_step(model, optimizer, batch)  # the optimizer's state and the gradients exist
        with LiveBytes() as live:
            loss = run.train_step(model, optimizer, batch)
        return live.peak, float(loss)


def test_chunked_loss_lowers_a_steps_peak_on_a_32k_vocabulary(monkeypatch):
    """1,024 tokens of a 32,768-token vocabulary under bf16 autocast, in chunks of 256 tokens (the
    default chunk holds 1,024 tokens of this vocabulary: benchmarks/lm_loss_memory.py measures it
    at that size, on 8,192 tokens). The plain loss's float32 copy of the logits, log-probabilities and their
    gradients are gone: the peak is lower by more than the float32 logits."""
    from scaletrain.data import lm_loss

    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 256 * 32768)
    plain_peak, plain_loss = _step_peak(False)
    chunked_peak, chunked_loss = _step_peak(True)
    assert chunked_loss == pytest.approx(plain_loss, rel=1e-4)
    logits = 4 * 256 * 32768 * 4  # the step's float32 logits: 128 MiB
    assert chunked_peak < plain_peak - logits, (plain_peak, chunked_peak)


def test_the_output_is_let_go_before_backward():
    seen = {}

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 32)

        def forward(self, x):
            logits = self.head(self.first(x).relu())
            seen["logits"] = weakref.ref(logits)
            return logits

    with scaletrain.init(strategy="single") as run:
        model = Probe()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = run.setup(model, optimizer)
        def in_backward(grad):
            seen.setdefault("alive", seen["logits"]() is not None)

        model.first.weight.register_hook(in_backward)
        run.train_step(model, optimizer, (torch.randn(4, 8), torch.randint(0, 32, (4,))), loss_fn=F.cross_entropy)
    assert seen["alive"] is False


def test_the_collector_is_frozen_after_setup_and_put_back():
    assert gc.isenabled()
    with scaletrain.init(strategy="single", gc_every=2) as run:
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = run.setup(model, optimizer)
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        for _ in range(3):
            run.train_step(model, optimizer, (torch.randn(4, 4), torch.randint(0, 2, (4,))), loss_fn=F.cross_entropy)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with scaletrain.init(strategy="single", gc_every=0) as run:
        run.setup(torch.nn.Linear(4, 2))
        assert gc.isenabled()


@pytest.mark.parametrize("options,words", [({"gc_every": -1}, "gc_every=-1"), ({"fused_norms": "maybe"}, "true or false"),
                                           ({"one_shard": "never"}, "one_shard='never'")])
def test_bad_switches_are_refused_in_one_line(options, words):
    from scaletrain.foundation.errors import UsageError

    with pytest.raises(UsageError) as caught:
        scaletrain.init(strategy="fsdp", **options)
    assert words in str(caught.value) and "\n" not in str(caught.value)
