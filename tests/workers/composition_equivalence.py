"""Run under torchrun: every composition whose world size is this job's, on both reference
models, built whole and built on the meta device, each compared with one process
(composition_reference); where sequences are split (cp), the Llama also with its own loss on
labelled batches. Rank 0 prints one `RESULT {json}` line per configuration, model and
build (the worst difference over ranks, whether every process started from the weights of an
ordinary build, and how many of the model's parameters some process held).

    torchrun --nproc-per-node N composition_equivalence.py [JOBS DIR]

With JOBS and DIR it then runs composition_resume.py's jobs of that world size in the same
processes (one launch for both: starting 8 processes costs more than either's work)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from composition_reference import MODELS, compare, reference, train_with  # noqa: E402

CONFIGS = {
    2: [("tp", {}),                                               # tp × 2
        ("fsdp", {"cp": 2, "activation_checkpointing": "full"})],  # context parallel × 2, blocks recomputed round the ring
    4: [("fsdp", {"tp": 2}),                                      # FSDP × TP, 2 × 2
        ("fsdp", {"dp_replicate": 2}),                            # HSDP, 2 replicas × 2 shards
        ("pipeline", {"pp": 2, "dp_shard": 2}),                   # pipeline × FSDP, 2 × 2
        ("fsdp", {"dp_shard": 2, "cp": 2}),                       # FSDP × CP, 2 × 2
        ("tp", {"tp": 2, "cp": 2})],                              # CP × TP, 2 × 2
    8: [("pipeline", {"pp": 2, "dp_shard": 2, "tp": 2})],         # pipeline × FSDP × TP, 2 × 2 × 2
}


def worst(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main() -> None:
    dist.init_process_group("gloo")  # shared by every scaletrain.init below (they do not own it)
    refs = {(name, "targets"): reference(name) for name in MODELS}
    refs["llama", "labels"] = reference("llama", "labels")
    for strategy, options in CONFIGS[dist.get_world_size()]:
        cases = [(name, "targets") for name in MODELS] + ([("llama", "labels")] if options.get("cp") else [])
        for name, form in cases:
            for meta in ((False, True) if form == "targets" else (False,)):
                # Every collective inside the run: its close() gives Gloo's threads the moment
                # they need before the group goes (a collective right before
                # destroy_process_group can abort the process at exit, with torch 2.13's Gloo).
                with scaletrain.init(strategy=strategy, **options) as run:
                    model, loss, same_start = train_with(run, name, meta, form)
                    result = compare(run, model, loss, refs[name, form])
                    mesh = run.describe()["mesh"]
                    every = [None] * dist.get_world_size()
                    dist.all_gather_object(every, result.pop("names"))
                    result = {k: worst(v) for k, v in result.items()}
                    result["same_start"] = worst(0.0 if same_start else 1.0) == 0.0
                result["covered"] = len(set().union(*every))
                result["parameters"] = len(refs[name, form]["params"])
                if dist.get_rank() == 0:
                    print("RESULT " + json.dumps({"strategy": strategy, "options": options, "model": name, "mesh": mesh,
                                                  "form": form, "meta_init": meta, **result}), flush=True)
    if len(sys.argv) > 2:
        from composition_resume import run_jobs

        run_jobs(sys.argv[1], Path(sys.argv[2]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
