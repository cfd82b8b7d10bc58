"""Run under torchrun: configurations of every strategy on one device kind, each 3 optimizer
steps from the same weights on the same global batches, each compared with one plain process
on the same device (tests/workers/strategy_reference.py; gpt_reference.py for tensor
parallel and the compositions).

    torchrun --nproc-per-node N tests/gpu/workers/equivalence.py --device cuda --backend nccl CASES.json

Each configuration gets its own `scaletrain.init` (its own process group, as a user's run
would), in one launch: process start-up is the cost. Rank 0 prints `START {name}` before a
configuration and `CASE {json}` after it: the worst difference over the ranks, the devices
the parameters live on, the loss scale of fp16, the graphs torch.compile made."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import scaletrain  # noqa: E402
from tests.gpu.workers import gpt_reference  # noqa: E402
from tests.workers import strategy_reference as tiny  # noqa: E402


def compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def reference_device(device: str) -> torch.device:
    if device != "cuda":
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())


_references: dict[tuple, dict] = {}


def reference_for(model: str, device: str, shared: bool) -> dict:
    """The one-process result on this process's device (cached: every case of a model shares it)."""
    where = torch.device("cuda", 0) if shared and device == "cuda" else reference_device(device)
    key = (model, str(where))
    if key not in _references:
        _references[key] = (gpt_reference if model == "gpt" else tiny).reference(where)
    return _references[key]


def parameter_devices(module: torch.nn.Module) -> list[str]:
    found = set()
    for p in module.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        found.add(str(local.device))
    return sorted(found)


def run_case(case: dict, device: str, backend: str) -> dict:
    options = dict(case["options"])
    grad_accum = options.get("grad_accum", 1)
    ref = reference_for(case["model"], device, case["shared_device"])
    if options.get("compile"):
        torch._dynamo.reset()  # this configuration compiles its own graphs, not an earlier one's cached
    graphs = compiled_graphs()
    if case["shared_device"] and device == "cuda":
        device = "cuda:0"  # every process on the first GPU
    with scaletrain.init(strategy=case["strategy"], backend=backend, device=device, **options) as run:
        if case["model"] == "gpt":
            model, loss = gpt_reference.train_with(run)
            result = gpt_reference.compare(run, model, loss, ref)
        else:
            model, loss = tiny.train_with(run, grad_accum)
            result = tiny.compare(run, model, loss, ref, grad_accum)
        result.update(loss=run.mean(loss).item(), reference_loss=ref["loss"], devices=parameter_devices(run.unwrap(model)),
                      backend=run.backend, graphs=compiled_graphs() - graphs)
        if run.scaler.enabled:
            result["loss_scale"] = float(run.scaler.factor())
        described = run.describe()
        every = [None] * run.world_size
        dist.all_gather_object(every, result)
    merged = {"name": case["name"], "world_size": len(every), "mesh": described.get("mesh"),
              "precision": described.get("precision")}
    for key in result:
        values = [r[key] for r in every]
        if key.endswith("diff"):
            merged[key] = max(values)
        elif key == "held":
            merged[key] = min(values)  # fewest parameters one process holds
        elif key in ("names", "devices"):
            merged[key] = sorted(set().union(*values))
        else:
            merged[key] = values[0]
    merged["covered"] = len(merged.pop("names"))
    merged["finite"] = all(math.isfinite(merged[k]) for k in ("loss", "param_diff"))
    return merged


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("cases", type=Path, help="JSON list of configurations")
    args = p.parse_args()
    rank0 = os.environ.get("RANK", "0") == "0"
    for case in json.loads(args.cases.read_text()):
        if rank0:
            print("START " + case["name"], flush=True)
        try:
            result = run_case(case, args.device, args.backend)
        except Exception as exc:
            # The failure itself, where it happened, as the check's line. One process can go on
            # to the next configuration; several cannot (the others may wait in a collective).
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"
            result = {"name": case["name"], "error": f"{type(exc).__name__}: {exc} (at {where})"[:600]}
            traceback.print_exc()
            if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                print("CASE " + json.dumps(result), flush=True)
                raise
        if rank0:
            print("CASE " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
