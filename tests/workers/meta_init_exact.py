"""Run under torchrun (2 processes): the trainer with its default build (`--meta-init auto`)
and with `--meta-init never`, under fsdp, tp and pipeline, on a model whose constructor does
what a replay of its modules' initialisation cannot (meta_init_models.model); and a model
built on the meta device under ddp, by the trainer (`--meta-init always`) and by the library
(`run.meta_device()`). Rank 0 prints one `RESULT {json}` line per run."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import scaletrain  # noqa: E402
from scaletrain.train.config import TrainConfig  # noqa: E402
from scaletrain.train.loop import train  # noqa: E402

import meta_init_models  # noqa: E402

RUNS = [("fsdp", "model", {}), ("tp", "model", {"parallelize": "meta_init_models:parallelize"}),
        ("pipeline", "model", {}), ("ddp", "plain", {})]


def trainer_runs(folder: Path) -> None:
    for strategy, factory, options in RUNS:
        for meta_init in (("auto", "never") if strategy != "ddp" else ("always", "never")):
            config = TrainConfig(strategy=strategy, workload="digits-mlp", model=f"meta_init_models:{factory}",
                                 max_steps=12, batch_size=16, meta_init=meta_init, strategy_options=options,
                                 log_every_steps=100, pin_cores=False)
            summary = train(config, folder / f"{strategy}-{meta_init}")
            if dist.get_rank() == 0:
                print("RESULT " + json.dumps({"strategy": strategy, "meta_init": meta_init,
                                              "loss": summary["final_loss"],
                                              "accuracy": summary["final_accuracy"]}), flush=True)


def library_ddp() -> None:
    """`run.meta_device()` under ddp: the weights an ordinary build from the same seed has."""
    with scaletrain.init(strategy="ddp", seed=3) as run:
        torch.manual_seed(3)
        ordinary = meta_init_models.plain()
        torch.manual_seed(3)
        with run.meta_device():
            model = meta_init_models.plain()
        model = run.setup(model)
        mine = run.unwrap(model).state_dict()
        same = all(torch.equal(mine[k], v) for k, v in ordinary.state_dict().items())
        if dist.get_rank() == 0:
            print("RESULT " + json.dumps({"strategy": "ddp", "meta_init": "library", "same_start": same}), flush=True)


def main() -> None:
    dist.init_process_group("gloo")
    with tempfile.TemporaryDirectory() as tmp:
        shared = [tmp]
        dist.broadcast_object_list(shared)  # one folder for both ranks' runs
        trainer_runs(Path(shared[0]))
        library_ddp()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
