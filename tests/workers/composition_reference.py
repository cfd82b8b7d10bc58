"""The one-process reference for the compositions (tensor parallel, FSDP × TP, HSDP, pipeline ×
FSDP, pipeline × FSDP × TP, context parallel and its compositions): two small transformer
language models — the built-in byte-level GPT and a Hugging Face Llama built from a config —
fixed global batches of token sequences (with a loss function on the logits; for the Llama
also as `{"input_ids", "labels"}`, its own loss, some labels ignored),
SGD with momentum (plain arithmetic: fp32 results agree to round-off, where Adam would blow
up round-off on gradients that are zero in exact arithmetic, such as a key's bias), 3
optimizer steps. Shared by the torchrun workers and the tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

STEPS = 3
GLOBAL_BATCH = 8
SEQUENCE = 16
VOCAB = 64
LR = 0.5


def gpt() -> nn.Module:
    from scaletrain.workloads.gpt import byte_gpt

    torch.manual_seed(1234)
    return byte_gpt(width=32, layers=2, heads=4)


def llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQUENCE,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config)


MODELS = {"stdlib-gpt": gpt, "llama": llama}


def batches(steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(99)
    out = []
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQUENCE + 1), generator=gen)
        out.append((tokens[:, :-1], tokens[:, 1:]))
    return out


IGNORED = 5  # the labels of each sequence's first positions do not count (-100)


def labelled(inputs: torch.Tensor) -> dict:
    """A transformers-style batch: the model shifts the labels and computes its own loss.
    Ignoring the first positions puts every ignored label in one part of a context-parallel
    split: the loss must still be the mean over every counted token of the batch."""
    labels = inputs.clone()
    labels[:, :IGNORED] = -100
    return {"input_ids": inputs, "labels": labels}


def loss_fn(output, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over every position, from logits or a model output holding them."""
    logits = getattr(output, "logits", output)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1).to(logits.device))


def optimizer_for(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def reference(name: str, form: str = "targets") -> dict:
    """Parameters and the last loss after STEPS steps in one plain process; `form` "labels":
    the model's own loss on labelled batches."""
    model = MODELS[name]()
    opt = optimizer_for(model)
    for inputs, targets in batches():
        opt.zero_grad()
        loss = model(**labelled(inputs)).loss if form == "labels" else loss_fn(model(inputs), targets)
        loss.backward()
        opt.step()
    return {"params": {n: p.detach().clone() for n, p in model.named_parameters()}, "loss": loss.item()}


def full_parameters(model: nn.Module) -> dict:
    """Parameter values by name; sharded (DTensor) ones gathered whole."""
    return {name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().cpu()
            for name, p in model.named_parameters()}


def ordinary_build(name: str) -> dict:
    """The initial parameters of an ordinary (whole, eager) build."""
    return {n: p.detach().clone() for n, p in MODELS[name]().named_parameters()}


def train_with(run, name: str, meta: bool = False, form: str = "targets") -> tuple:
    """STEPS optimizer steps through `run` on this process's data-parallel share of each global
    batch; the model built whole, or (meta) on the meta device and materialised by setup;
    `form` "labels": the model's own loss on labelled batches.
    Returns (model, last loss, whether setup's initial weights equal an ordinary build's)."""
    if meta:
        with run.meta_device():
            model = MODELS[name]()
    else:
        model = MODELS[name]()
    model, opt = run.setup(model, optimizer_for(model))
    initial = full_parameters(run.unwrap(model))
    ordinary = ordinary_build(name)
    same_start = all(torch.equal(value, ordinary[key]) for key, value in initial.items())
    shard, shards = run.data_parallel_rank, run.data_parallel_size
    per = GLOBAL_BATCH // shards
    for inputs, targets in batches():
        mine = slice(shard * per, (shard + 1) * per)
        if form == "labels":
            loss = run.train_step(model, opt, labelled(inputs[mine]))
        else:
            loss = run.train_step(model, opt, inputs[mine], targets[mine], loss_fn=loss_fn)
    return model, loss, same_start


def compare(run, model, loss, ref: dict) -> dict:
    """Largest differences against the reference, as this process sees them (the parameters it holds)."""
    mine = full_parameters(run.unwrap(model))
    unknown = [n for n in mine if n not in ref["params"]]
    assert not unknown, f"unknown parameter names {unknown}"
    return {"param_diff": max((mine[n] - ref["params"][n]).abs().max().item() for n in mine),
            "loss_diff": abs(run.mean(loss).item() - ref["loss"]), "names": sorted(mine)}
