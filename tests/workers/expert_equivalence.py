"""Expert parallel against one process (moe_reference.py).

    torchrun --nproc-per-node 2 expert_equivalence.py DIR   # ep 2: three models; then the checkpoint run
    torchrun --nproc-per-node 4 expert_equivalence.py DIR   # fsdp 4 × ep 2: two models; HSDP × ep, TP × ep
    python expert_equivalence.py DIR resume                 # ep 1, one process, from ep 2's checkpoints

Each configuration trains every model STEPS steps on this process's data-parallel share of the
global batches, counting the tokens each expert received (all processes' counts summed after
every step); rank 0 prints `RESULT {json}`: the worst parameter difference over ranks, every
step's loss difference, whether every step's tokens per expert equal the reference's; and
`META {json}`: whether the built-in built on the meta device and materialised as each process's
share starts from exactly an ordinary build's weights.

On 2 processes the built-in also trains at ep 2 with checkpoints (full and sharded) after step 1
and its state at the end (DIR/uninterrupted); `resume` loads each checkpoint into one process
(ep 1) and trains the last steps on the whole global batches (DIR/<layout>/resumed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from moe_reference import (GLOBAL_BATCH, MODELS, batches, full_parameters, optimizer_for,  # noqa: E402
                           reference, step_args)
from scaletrain.parallel.expert_load import ExpertLoad  # noqa: E402

CONFIGS = {2: [("fsdp", {"ep": 2}, ("stdlib-moe", "mixtral", "qwen3-moe"))],
           4: [("fsdp", {"ep": 2}, ("stdlib-moe", "mixtral")),
               ("fsdp", {"dp_replicate": 2, "ep": 2}, ("stdlib-moe",)),  # HSDP: experts replicated across replicas
               ("fsdp", {"tp": 2, "ep": 2}, ("stdlib-moe",))]}           # TP splits attention, ep the experts
SAVE_AT = 1
LAYOUTS = ("full", "sharded")


def worst(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def train(run, name: str, save: Path | None = None) -> tuple:
    """STEPS steps through `run` on this process's share; returns (model, losses, counts)."""
    model = MODELS[name]()
    model, opt = run.setup(model, optimizer_for(model))
    load = ExpertLoad(run.unwrap(model), run.device, run.topology.dims.tp)
    per = GLOBAL_BATCH // run.data_parallel_size
    mine = slice(run.data_parallel_rank * per, (run.data_parallel_rank + 1) * per)
    losses, counts = [], []
    for inputs, targets in batches():
        loss = run.train_step(model, opt, **step_args(name, inputs[mine], targets[mine]))
        load.step_done()
        load.sync()
        losses.append(run.mean(loss).item())
        counts.append(load.last)
        if save is not None and run.steps_taken == SAVE_AT:
            for layout in LAYOUTS:
                run.save_checkpoint(save / "checkpoints" / layout, model, opt, layout=layout)
    if save is not None:
        run.checkpointer(save / "uninterrupted", layout="full").save(run.steps_taken, model, opt)
    return model, losses, counts


def equivalence(root: Path) -> None:
    world = dist.get_world_size()
    for strategy, options, names in CONFIGS[world]:
        for name in names:
            with scaletrain.init(strategy=strategy, **options) as run:
                ref = reference(name, run.data_parallel_size)
                model, losses, counts = train(run, name)
                mine = full_parameters(run.unwrap(model))
                assert set(mine) == set(ref["params"]), sorted(set(mine) ^ set(ref["params"]))
                diff = worst(max((mine[n] - ref["params"][n]).abs().max().item() for n in mine))
                result = {"strategy": strategy, "options": options, "model": name, "mesh": run.describe()["mesh"],
                          "param_diff": diff, "loss_diffs": [abs(a - b) for a, b in zip(losses, ref["losses"])],
                          "same_routing": counts == ref["counts"], "counts": counts,
                          "experts_held": run.describe().get("expert_parallel")}
            if dist.get_rank() == 0:
                print("RESULT " + json.dumps(result), flush=True)
    with scaletrain.init(strategy="fsdp", ep=2) as run:  # built on the meta device, each process its own share
        with run.meta_device():
            model = MODELS["stdlib-moe"]()
        model, _ = run.setup(model, optimizer_for(model))
        ordinary = MODELS["stdlib-moe"]().state_dict()
        same = all(torch.equal(v, ordinary[k]) for k, v in full_parameters(run.unwrap(model)).items())
        same = worst(0.0 if same else 1.0) == 0.0
    if dist.get_rank() == 0:
        print("META " + json.dumps({"world": world, "same_start": same}), flush=True)
    if world == 2:  # the checkpoint run, ep 2
        with scaletrain.init(strategy="fsdp", ep=2, seed=0) as run:
            train(run, "stdlib-moe", root)


def resume(root: Path) -> None:
    """One process, ep 1: each of ep 2's checkpoints loaded, the remaining steps trained."""
    for layout in LAYOUTS:
        with scaletrain.init(strategy="single", seed=0) as run:
            model = MODELS["stdlib-moe"]()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)  # the weights must come from the checkpoint
            model, opt = run.setup(model, optimizer_for(model))
            loaded = run.load_checkpoint(root / "checkpoints" / layout, model, opt)
            assert loaded["step"] == SAVE_AT, loaded
            for inputs, targets in batches()[SAVE_AT:]:
                run.train_step(model, opt, **step_args("stdlib-moe", inputs, targets))
            run.checkpointer(root / layout / "resumed", layout="full").save(run.steps_taken, model, opt)


def main() -> None:
    root = Path(sys.argv[1])
    if sys.argv[2:] == ["resume"]:
        resume(root)
        return
    dist.init_process_group("gloo")  # shared by every scaletrain.init below
    equivalence(root)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
