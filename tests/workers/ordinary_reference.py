"""The models, data and one-process references (plain torch, no scaletrain) of
ordinary_code.py: what one process computes on the global batches."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

STEPS = 3
GLOBAL_BATCH = 8
MAX_NORM = 0.05  # small enough that every step really clips
VOCAB, LENGTH = 50, 12


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=16, n_layer=2, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def lm_batches() -> list[dict]:
    """Dict samples as a tokenizer would give them; labels = input_ids (the model shifts)."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(STEPS * GLOBAL_BATCH):
        ids = torch.randint(0, VOCAB, (LENGTH,), generator=g)
        rows.append({"input_ids": ids, "attention_mask": torch.ones(LENGTH, dtype=torch.long), "labels": ids})
    return rows


def stack(rows: list[dict]) -> dict:
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}


def gpt2_reference() -> dict:
    model = gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    rows = lm_batches()
    losses, norms = [], []
    for step in range(STEPS):
        batch = stack(rows[step * GLOBAL_BATCH:(step + 1) * GLOBAL_BATCH])
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM).item())
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return {"state": model.state_dict(), "losses": losses, "norms": norms, "lr": optimizer.param_groups[0]["lr"]}


def sequential() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def xy_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(GLOBAL_BATCH, 6, generator=g), torch.randint(0, 3, (GLOBAL_BATCH,), generator=g))
            for _ in range(STEPS)]


def sequential_reference() -> dict:
    model = sequential()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for inputs, targets in xy_batches():
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), targets).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        scheduler.step()
    return {"state": model.state_dict(), "lr": optimizer.param_groups[0]["lr"]}


def gan_models() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    return (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)),
            nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1)))


def gan_reference(inputs_only: bool = False):
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(GLOBAL_BATCH, 4, generator=g), torch.randn(GLOBAL_BATCH, 2, generator=g) + 2)
            for _ in range(STEPS)]
    if inputs_only:
        return data
    generator, discriminator = gan_models()
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(discriminator.parameters(), lr=0.1)
    for noise, real in data:
        opt_d.zero_grad()
        scores = discriminator(torch.cat([real, generator(noise).detach()]))
        (scores[:GLOBAL_BATCH].mean() - scores[GLOBAL_BATCH:].mean()).backward()
        opt_d.step()
        opt_g.zero_grad()
        discriminator(generator(noise)).mean().backward()
        opt_g.step()
    return {"generator": generator.state_dict(), "discriminator": discriminator.state_dict()}


def max_difference(state: dict, expected: dict) -> float:
    assert set(state) == set(expected), sorted(set(state) ^ set(expected))[:5]
    return max((state[k].detach().float().cpu() - expected[k].float()).abs().max().item() for k in expected)
