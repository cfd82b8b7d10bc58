"""Run by tests/test_perf_compression.py under torchrun (2 processes): DDP with each gradient
compression, against fp32 gradients, then trained on digits-mlp. Rank 0 prints JSON."""

import json
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import scaletrain
from scaletrain.workloads.digits import digits_datasets
from scaletrain.workloads.models import digits_mlp

COMPRESSIONS = sys.argv[1].split(",")
EPOCHS = int(sys.argv[2])


def gradients(compression, inputs, targets):
    with scaletrain.init("ddp", threads=1, grad_compression=compression) as run:
        torch.manual_seed(0)
        model = run.setup(digits_mlp())
        F.cross_entropy(model(inputs), targets).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])


def accuracy(compression, train_set, held_out):
    with scaletrain.init("ddp", threads=1, grad_compression=compression) as run:
        torch.manual_seed(0)
        model = digits_mlp()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model, optimizer = run.setup(model, optimizer)
        loader = run.loader(train_set, batch_size=32, shuffle=True, seed=0)
        for _ in range(EPOCHS):
            for inputs, targets in loader:
                run.train_step(model, optimizer, inputs, targets)
        return run.evaluate(model, held_out)["accuracy"]


dist.init_process_group("gloo")  # one group for every run below (each is one compression)
train_set, held_out = digits_datasets(0)
rank = dist.get_rank()
mine = slice(rank * 64, rank * 64 + 64)  # each rank its own samples
inputs, targets = train_set.tensors[0][mine], train_set.tensors[1][mine]
exact = gradients("none", inputs, targets)
report = {"grad_error": {}, "accuracy": {}}
for compression in COMPRESSIONS:
    if compression != "powersgd":  # PowerSGD's first steps are exact by design
        got = gradients(compression, inputs, targets)
        report["grad_error"][compression] = ((got - exact).abs().max() / exact.abs().max()).item()
for compression in ["none", *COMPRESSIONS]:
    report["accuracy"][compression] = accuracy(compression, train_set, held_out)
if rank == 0:
    print(json.dumps(report))
dist.destroy_process_group()
