"""The one-process reference that every strategy must reproduce: a tiny model of named
blocks, fixed global batches, SGD with momentum (plain arithmetic, so fp32 results agree to
round-off), 3 optimizer steps. Shared by the in-process tests and the torchrun worker."""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

STEPS = 3
GLOBAL_BATCH = 8
LR = 0.1


def tiny_model() -> nn.Sequential:
    torch.manual_seed(1234)  # the same initial weights in every process and every test
    return nn.Sequential(OrderedDict(
        fc1=nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.Tanh()),
        fc2=nn.Sequential(nn.Linear(12, 12), nn.Tanh()),
        fc3=nn.Sequential(nn.Linear(12, 12), nn.Tanh()),
        fc4=nn.Linear(12, 5),
    ))


def batches(steps: int = STEPS, size: int = GLOBAL_BATCH):
    gen = torch.Generator().manual_seed(99)
    return [(torch.randn(size, 4, 4, generator=gen), torch.randint(0, 5, (size,), generator=gen))
            for _ in range(steps)]


def held_out() -> TensorDataset:
    gen = torch.Generator().manual_seed(7)
    return TensorDataset(torch.randn(13, 4, 4, generator=gen), torch.randint(0, 5, (13,), generator=gen))


def optimizer_for(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def reference(device: str | torch.device = "cpu") -> dict:
    """Parameters (on the CPU), last loss and held-out metrics after STEPS steps in one plain
    process on `device`."""
    model = tiny_model().to(device)
    opt = optimizer_for(model)
    for inputs, targets in batches():
        opt.zero_grad()
        loss = F.cross_entropy(model(inputs.to(device)), targets.to(device))
        loss.backward()
        opt.step()
    with torch.no_grad():
        x, y = (t.to(device) for t in held_out().tensors)
        logits = model(x)
        evaluation = {"loss": F.cross_entropy(logits, y).item(),
                      "accuracy": (logits.argmax(1) == y).float().mean().item()}
    return {"params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()},
            "loss": loss.item(), "eval": evaluation}


def full_parameters(model: nn.Module) -> dict:
    """Parameter values by name; sharded (DTensor) ones gathered whole."""
    out = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = full.detach().float().cpu()
    return out


def train_with(run, grad_accum: int = 1) -> tuple:
    """3 optimizer steps through `run` on this rank's share of each global batch (split again
    into `grad_accum` micro-steps). Returns (model, loss of the last step)."""
    model = tiny_model()
    model, opt = run.setup(model, optimizer_for(model))
    shard, shards = run.data_parallel_rank, run.data_parallel_size
    for inputs, targets in batches():
        micro = GLOBAL_BATCH // grad_accum
        for k in range(grad_accum):
            x, y = inputs[k * micro:(k + 1) * micro], targets[k * micro:(k + 1) * micro]
            per = micro // shards
            loss = run.train_step(model, opt, x[shard * per:(shard + 1) * per], y[shard * per:(shard + 1) * per])
    return model, loss


def compare(run, model, loss, ref: dict, grad_accum: int = 1) -> dict:
    """Largest differences against the reference, as seen from this rank (only parameters it holds)."""
    mine = full_parameters(run.unwrap(model))
    missing = [n for n in mine if n not in ref["params"]]
    assert not missing, f"unknown parameter names {missing}"
    param_diff = max((mine[n] - ref["params"][n]).abs().max().item() for n in mine)
    evaluation = run.evaluate(model, held_out(), batch_size=5)
    # With accumulation the last loss is the last micro-batch's, not the whole batch's.
    loss_diff = abs(run.mean(loss).item() - ref["loss"]) if grad_accum == 1 else 0.0
    return {"param_diff": param_diff, "loss_diff": loss_diff, "held": len(mine), "names": sorted(mine),
            "eval_loss_diff": abs(evaluation["loss"] - ref["eval"]["loss"]),
            "eval_acc_diff": abs(evaluation["accuracy"] - ref["eval"]["accuracy"]),
            "eval_count": evaluation["count"]}
