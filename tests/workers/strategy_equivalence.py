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
from strategy_reference import compare, reference, train_with  # noqa: E402

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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
