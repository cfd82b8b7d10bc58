"""Run under torchrun with 2 processes: every multi-process strategy in turn, in one launch
(process start-up is the expensive part), each compared with the one-process reference.
Rank 0 prints one `RESULT {json}` line per configuration (worst difference over ranks)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from strategy_reference import compare, full_parameters, reference, train_with  # noqa: E402

CONFIGS = [
    ("ddp", {}),
    ("hybrid", {"devices_per_process": 2, "microbatches": 2}),
    ("pipeline", {"schedule": "gpipe", "microbatches": 2}),
    ("pipeline", {"schedule": "1f1b", "microbatches": 4}),
    ("pipeline", {"schedule": "gpipe", "pipeline_stages": 1, "microbatches": 2}),  # 2 replicas of 1 stage
    ("pipeline", {"split_points": ["fc4"], "schedule": "1f1b", "microbatches": 2}),
    ("fsdp", {}),
    ("ddp", {"grad_accum": 2}),
    ("hybrid", {"grad_accum": 2}),
    ("pipeline", {"schedule": "1f1b", "microbatches": 2, "grad_accum": 2}),
    ("pipeline", {"pipeline_stages": 1, "microbatches": 2, "grad_accum": 2}),
    ("fsdp", {"grad_accum": 2}),
]


def worst(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def unsynced_gradients_differ(run) -> bool:
    """After one micro-step inside no_sync, each rank must still hold only its own gradient."""
    from strategy_reference import batches, optimizer_for, tiny_model

    model = tiny_model()
    model, opt = run.setup(model, optimizer_for(model))
    inputs, targets = batches(1)[0]
    per = len(inputs) // run.world_size
    run.train_step(model, opt, inputs[run.rank * per:(run.rank + 1) * per], targets[run.rank * per:(run.rank + 1) * per])
    norm = torch.stack([p.grad.norm() for p in run.unwrap(model).parameters()]).sum().reshape(1)
    both = [torch.zeros(1), torch.zeros(1)]
    dist.all_gather(both, norm)
    return not torch.allclose(both[0], both[1])


def one_adam_step_memory(run) -> list:
    """Per-process bytes of parameters, gradients and Adam state after one step."""
    from strategy_reference import batches, tiny_model

    model = tiny_model()
    model, opt = run.setup(model, torch.optim.Adam(model.parameters(), lr=1e-3))
    inputs, targets = batches(1)[0]
    run.train_step(model, opt, inputs[run.rank::run.world_size], targets[run.rank::run.world_size])
    return run.describe()["memory_per_process"]


def tied_model() -> torch.nn.Sequential:
    """A language model's usual tie across top-level blocks: the head's weight is the
    embedding's (FSDP refused it, "already managed by another FSDP group")."""
    from torch import nn

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(16, 8)

        def forward(self, x):
            return self.emb(x)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(8, 16, bias=False)

        def forward(self, x):
            return self.out(x)

    torch.manual_seed(3)
    model = nn.Sequential(Embed(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), Head())
    model[2].out.weight = model[0].emb.weight
    return model


def tied_weights_under_fsdp(run) -> dict:
    """3 SGD steps of the tied model under `run` against one plain process: the worst
    parameter difference, and whether the tie held."""
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(8)
    data = [torch.randint(0, 16, (8, 5), generator=gen) for _ in range(3)]

    def next_token_loss(logits, targets):
        return F.cross_entropy(logits.reshape(-1, 16), targets.reshape(-1))

    plain = tied_model()
    opt = torch.optim.SGD(plain.parameters(), lr=0.5)
    for tokens in data:
        opt.zero_grad()
        next_token_loss(plain(tokens[:, :-1]), tokens[:, 1:]).backward()
        opt.step()
    model = tied_model()
    model, opt = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.5))
    per = 8 // run.world_size
    for tokens in data:
        mine = tokens[run.rank * per:(run.rank + 1) * per]
        run.train_step(model, opt, mine[:, :-1], mine[:, 1:], loss_fn=next_token_loss)
    mine, ref = full_parameters(run.unwrap(model)), dict(plain.named_parameters())
    unwrapped = run.unwrap(model)
    return {"param_diff": worst(max((mine[n] - ref[n].detach()).abs().max().item() for n in mine)),
            "tied": unwrapped[2].out.weight is unwrapped[0].emb.weight, "names": sorted(mine)}


def a_parallelize_that_splits_nothing(run) -> str:
    """parallelize=fn that returns without splitting: refused on every rank alike (it was
    reported as "layers split 2 ways" while each process computed the whole model)."""
    from scaletrain.foundation.errors import UsageError
    from strategy_reference import tiny_model

    model = tiny_model()
    try:
        run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    except UsageError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


def main() -> None:
    dist.init_process_group("gloo")  # shared by every scaletrain.init below (they do not own it)
    ref = reference()
    for name, options in CONFIGS:
        with scaletrain.init(strategy=name, **options) as run:
            model, loss = train_with(run, options.get("grad_accum", 1))
            result = compare(run, model, loss, ref, options.get("grad_accum", 1))
        result = {k: worst(v) if k.endswith("diff") else v for k, v in result.items()}
        result["held"] = int(-worst(-result["held"]))  # fewest parameters held by one rank
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, result.pop("names"))
        result["covered"] = len(set().union(*every))  # parameters held by some rank
        if dist.get_rank() == 0:
            print("RESULT " + json.dumps({"strategy": name, "options": options, **result}), flush=True)
    for name in ("ddp", "hybrid"):
        with scaletrain.init(strategy=name, grad_accum=2) as run:
            differ = unsynced_gradients_differ(run)
        if dist.get_rank() == 0:
            print("NOSYNC " + json.dumps({"strategy": name, "differ": differ}), flush=True)
    for name, options in [("ddp", {}), ("hybrid", {}), ("pipeline", {"microbatches": 2}), ("fsdp", {})]:
        with scaletrain.init(strategy=name, precision="bf16", **options) as run:
            _, loss = train_with(run)
            value = run.mean(loss).item()
            fp32 = reference()["loss"]
        if dist.get_rank() == 0:
            print("BF16 " + json.dumps({"strategy": name, "loss": value, "fp32_loss": fp32,
                                          "finite": math.isfinite(value)}), flush=True)
    for name in ("ddp", "fsdp"):
        with scaletrain.init(strategy=name) as run:
            memory = one_adam_step_memory(run)
        if dist.get_rank() == 0:
            print("MEMORY " + json.dumps({"strategy": name, "per_process": memory}), flush=True)
    with scaletrain.init(strategy="fsdp") as run:
        tied = tied_weights_under_fsdp(run)
    if dist.get_rank() == 0:
        print("TIED " + json.dumps(tied), flush=True)
    with scaletrain.init(strategy="tp", tp=2, parallelize=lambda model, mesh: None) as run:
        refused = a_parallelize_that_splits_nothing(run)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, refused)
    if dist.get_rank() == 0:
        print("NOSPLIT " + json.dumps({"every_rank": every}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
