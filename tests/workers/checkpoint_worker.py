"""Saves or loads a checkpoint through the library API, under whatever launcher started it.

    python checkpoint_worker.py --wrap ddp|fsdp [--load DIR] [--save DIR] [--steps N]

--wrap fsdp shards the model with FSDP2's fully_shard here (the checkpoint code does not
know or care which wrapper it gets). --load checks, on every rank, that the model and
optimizer now hold exactly what the checkpoint file holds, and that the data position was
restored; then --steps more steps train and --save writes a new checkpoint.
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

import scaletrain
from scaletrain.checkpoint import load_state, resolve_source
from scaletrain.workloads.digits import digits_datasets
from scaletrain.workloads.models import digits_mlp


def full_state(model, optimizer):
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, flatten_optimizer_state_dict=True)
    return get_state_dict(model, (optimizer,), options=options)


def same(a, b, where):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a.cpu(), b.cpu()), f"{where} differs"
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--wrap", choices=["ddp", "fsdp"], required=True)
    p.add_argument("--load", type=Path)
    p.add_argument("--save", type=Path)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    # A different seed when loading: the weights must come from the checkpoint, not the seed.
    run = scaletrain.init(strategy="ddp", seed=1 if args.load else 0)
    model = digits_mlp(hidden=32)
    if args.wrap == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        model, optimizer = run.setup(model, torch.optim.Adam(model.parameters(), lr=1e-2))
    train_set, _ = digits_datasets(0)
    loader = run.loader(train_set, batch_size=16)

    if args.load:
        resumed = run.load_checkpoint(args.load, model, optimizer, loader=loader)
        assert resumed is not None
        model_state, optim_state = full_state(model, optimizer)
        if run.rank == 0:
            saved = load_state(resolve_source(args.load) / "state.pt")
            same(saved["model"], model_state, "model")
            same(saved["optimizer"], optim_state, "optimizer")
        position = loader.position()
        assert position["epoch"] == resumed["loader"]["epoch"], position
        samples = resumed["loader"]["samples_done"]
        assert position["batches_done"] == round(samples / (16 * run.world_size)), (position, resumed["loader"])
        assert run.steps_taken == resumed["step"]
        run.print(f"restored step {resumed['step']} saved by {resumed['world_size']} process(es) "
                  f"into {run.world_size}")

    batches = iter(loader)
    losses = [run.train_step(model, optimizer, *next(batches), F.cross_entropy) for _ in range(args.steps)]
    assert all(torch.isfinite(loss) for loss in losses)
    if args.save:
        run.save_checkpoint(args.save, model, optimizer, loader=loader)
        run.print(f"saved step {run.steps_taken} from {run.world_size} process(es)")
    run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
