"""Raw DDP, written by hand as the PyTorch tutorial does, run under torchrun:

    torchrun --nproc-per-node 2 benchmarks/run_raw_ddp.py --result raw.json

It is the reference the other runners are compared to."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Timer, build, parse_args, timed_epochs, timeline  # noqa: E402


def main() -> None:
    args = parse_args()
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    timeline("rank: torch imported")
    dist.init_process_group("nccl" if cuda else "gloo")  # torchrun's env:// variables
    timeline("rank: process group")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, train_set, lr = build(args.workload)
    timeline("rank: model built")
    model = DistributedDataParallel(model.to(device), device_ids=[device] if cuda else None)
    timeline("rank: model set up")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, pin_memory=cuda)
    timer = Timer(rank, world, args.max_steps)

    def step(inputs, targets):
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss.detach()

    loss = timed_epochs(timer, loader, args.epochs, step, before_epoch=sampler.set_epoch)
    timer.write(args.result, loss=loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
