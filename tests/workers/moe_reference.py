"""The one-process reference for expert parallel: three small mixtures of experts — the built-in
stdlib-moe, a Hugging Face Mixtral and a Qwen3-MoE built from configs, 4 experts, each token
to 2 — trained 3 steps with SGD and momentum on fixed global batches, the router's balance loss
included, counting the tokens each expert received at every step.

Data parallelism averages the processes' losses, each over its own batch. The built-in's
sequence-wise balance loss is a mean over samples, so the mean of the processes' losses is the
loss of the global batch; Hugging Face's balance loss (Switch's, over a whole batch) is not, so
the reference computes the model's loss on each data-parallel process's share of the global
batch and averages them — what every data-parallel trainer (torchtitan, Megatron, Hugging Face)
trains. Shared by the torchrun workers and the tests."""

from __future__ import annotations

import torch
from torch import nn

STEPS = 3
GLOBAL_BATCH = 8
SEQUENCE = 16
VOCAB = 64
EXPERTS = 4
LR = 0.1


def stdlib_moe() -> nn.Module:
    from scaletrain.workloads.moe_gpt import byte_moe

    torch.manual_seed(1234)
    return byte_moe(width=32, layers=2, heads=4, experts=EXPERTS, top_k=2, context=SEQUENCE)


def mixtral() -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(1234)
    return MixtralForCausalLM(MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=EXPERTS, num_experts_per_tok=2, max_position_embeddings=SEQUENCE,
        output_router_logits=True, router_aux_loss_coef=0.02, tie_word_embeddings=False))


def qwen3_moe() -> nn.Module:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(1234)
    return Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=32, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=EXPERTS, num_experts_per_tok=2,
        max_position_embeddings=SEQUENCE, output_router_logits=True, router_aux_loss_coef=0.02, mlp_only_layers=[],
        decoder_sparse_step=1, tie_word_embeddings=False))


MODELS = {"stdlib-moe": stdlib_moe, "mixtral": mixtral, "qwen3-moe": qwen3_moe}


def batches(steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQUENCE + 1), generator=gen)
        out.append((tokens[:, :-1], tokens[:, 1:]))
    return out


def optimizer_for(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def step_args(name: str, inputs: torch.Tensor, targets: torch.Tensor) -> dict:
    """What run.train_step takes for a share of a batch: the built-in's inputs, targets and the
    language-model task's loss (its balance loss added); a Hugging Face model's labelled batch
    (its own loss, its balance loss included)."""
    if name == "stdlib-moe":
        from scaletrain.workloads.tasks import get_task

        return {"batch": inputs, "targets": targets, "loss_fn": get_task("lm").loss_fn}
    return {"batch": {"input_ids": inputs, "labels": inputs}}


def loss_of(model: nn.Module, name: str, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    args = step_args(name, inputs, targets)
    if name == "stdlib-moe":
        return args["loss_fn"](model(inputs), targets)
    return model(**args["batch"]).loss


def reference(name: str, shards: int) -> dict:
    """Parameters, every step's mean loss and tokens per expert after STEPS steps in one plain
    process; each step's loss the mean of the `shards` data-parallel shares' losses."""
    from scaletrain.parallel.expert_load import ExpertLoad

    model = MODELS[name]()
    load = ExpertLoad(model, torch.device("cpu"))
    opt = optimizer_for(model)
    losses, counts = [], []
    per = GLOBAL_BATCH // shards
    for inputs, targets in batches():
        opt.zero_grad()
        loss = torch.stack([loss_of(model, name, inputs[i * per:(i + 1) * per], targets[i * per:(i + 1) * per])
                            for i in range(shards)]).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        counts.append(load.pending.tolist())
        load.pending.zero_()
    return {"params": {n: p.detach().clone() for n, p in model.named_parameters()}, "losses": losses,
            "counts": counts}


def full_parameters(model: nn.Module) -> dict:
    """Parameter values by name; sharded (DTensor) ones gathered whole."""
    return {name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().cpu()
            for name, p in model.named_parameters()}
