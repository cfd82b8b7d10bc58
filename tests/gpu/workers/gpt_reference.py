"""The one-process reference for tensor parallel and the compositions: a small byte-level GPT
(scaletrain's stdlib-gpt, whose blocks declare a tensor-parallel plan) trained 3 SGD steps
on fixed global batches of random bytes. Every configuration must end where one plain
process on the same device ends."""

from __future__ import annotations

import torch

from scaletrain.workloads.gpt import byte_gpt, lm_loss
from tests.workers.strategy_reference import full_parameters

STEPS = 3
GLOBAL_BATCH = 8
CONTEXT = 16
LR = 0.1


def gpt_model() -> torch.nn.Sequential:
    torch.manual_seed(4321)  # the same initial weights in every process
    return byte_gpt(width=32, layers=2, heads=4)  # 4 blocks: 2 pipeline stages; 4 heads: tp 2


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(5)
    return [(torch.randint(0, 256, (GLOBAL_BATCH, CONTEXT), generator=gen),
             torch.randint(0, 256, (GLOBAL_BATCH, CONTEXT), generator=gen)) for _ in range(STEPS)]


def optimizer_for(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def reference(device: str | torch.device) -> dict:
    model = gpt_model().to(device)
    opt = optimizer_for(model)
    for inputs, targets in batches():
        opt.zero_grad()
        loss = lm_loss(model(inputs.to(device)), targets.to(device))
        loss.backward()
        opt.step()
    return {"params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()}, "loss": loss.item()}


def train_with(run) -> tuple:
    """3 steps through `run`, each process on its data-parallel shard of every global batch."""
    model = gpt_model()
    model, opt = run.setup(model, optimizer_for(model))
    shard, shards = run.data_parallel_rank, run.data_parallel_size
    per = GLOBAL_BATCH // shards
    for inputs, targets in batches():
        mine = slice(shard * per, (shard + 1) * per)
        loss = run.train_step(model, opt, inputs[mine], targets[mine], loss_fn=lm_loss)
    return model, loss


def compare(run, model, loss, ref: dict) -> dict:
    mine = full_parameters(run.unwrap(model))
    missing = [n for n in mine if n not in ref["params"]]
    assert not missing, f"unknown parameter names {missing}"
    return {"param_diff": max((mine[n] - ref["params"][n]).abs().max().item() for n in mine),
            "loss_diff": abs(run.mean(loss).item() - ref["loss"]), "held": len(mine), "names": sorted(mine)}
