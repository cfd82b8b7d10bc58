"""Hugging Face Accelerate, as its documentation writes the loop (Accelerator, prepare,
accelerator.backward), run by `accelerate launch` with its defaults."""

import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Timer, build, parse_args, timed_epochs  # noqa: E402


def main() -> None:
    args = parse_args()
    # Without a GPU, Accelerate runs several processes only when told it is on the CPU.
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    model, train_set, lr = build(args.workload)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    timer = Timer(accelerator.process_index, accelerator.num_processes, args.max_steps)

    def step(inputs, targets):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        return loss.detach()

    loss = timed_epochs(timer, loader, args.epochs, step)
    timer.write(args.result, loss=loss.item(), distributed_type=str(accelerator.distributed_type))
    accelerator.end_training()


if __name__ == "__main__":
    main()
