"""A training script in plain torch.distributed: nothing in it knows about scaletrain.

It reads torch's env:// variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which every
launcher provides — torchrun itself, and `scaletrain launch` for spawn, mpirun and srun too:

    scaletrain launch --nproc-per-node 2 examples/plain_ddp.py
    scaletrain launch --nproc-per-node 2 --launcher torchrun examples/plain_ddp.py
    scaletrain launch --nproc-per-node 2 --launcher mpirun examples/plain_ddp.py
    torchrun --nproc-per-node 2 examples/plain_ddp.py          # works without scaletrain too

It fits a small linear model with DistributedDataParallel on Gloo (CPU), then checks that
every rank ended with identical weights, and rank 0 prints (and optionally writes) a summary.
"""

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", help="rank 0 writes a JSON summary here")
    args = parser.parse_args()

    dist.init_process_group(backend="gloo")  # env:// — the launcher set the variables
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial weights on every rank
    model = DDP(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    # Each rank draws its own shard of a noisy linear problem y = x·w + 1.
    generator = torch.Generator().manual_seed(1000 + rank)
    true_w = torch.arange(1.0, 9.0).unsqueeze(1) / 8
    for _ in range(args.steps):
        x = torch.randn(32, 8, generator=generator)
        y = x @ true_w + 1 + 0.01 * torch.randn(32, 1, generator=generator)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP averages the gradients over all ranks here
        optimizer.step()

    # Every replica must hold the same weights: gather them and compare.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    in_sync = all(torch.equal(gathered[0], g) for g in gathered)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    loss_sum = loss.detach().clone()
    dist.all_reduce(loss_sum)
    print(f"rank {rank}/{world} (local rank {os.environ.get('LOCAL_RANK')}) on {socket.gethostname()}: "
          f"loss {loss.item():.4f}", flush=True)
    if rank == 0:
        summary = {"world_size": world, "in_sync": in_sync, "mean_loss": loss_sum.item() / world,
                   "hosts": hosts, "steps": args.steps}
        print(f"summary: {json.dumps(summary)}", flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(summary, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
