"""Run under torchrun with 2 processes: ordinary training code under each strategy, each
compared with one plain process (no scaletrain) on the same global batches. Rank 0 prints
one `RESULT {json}` line per case.

- a transformers GPT-2 built from a config (dict batches, the model's own loss, a learning
  rate schedule, gradient clipping), trained by `train_step` and by a hand-written loop;
- clipping under pipeline (the norm across stages);
- the schedule re-bound to the optimizer the strategy really uses (fsdp, pipeline);
- a GAN-shaped pair of models and optimizers;
- a stream (IterableDataset) with 2 DataLoader workers: which samples each rank saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain  # noqa: E402
from ordinary_reference import (GLOBAL_BATCH, MAX_NORM, STEPS, gan_models, gan_reference, gpt2, gpt2_reference,  # noqa: E402
                                lm_batches, max_difference, sequential, sequential_reference, xy_batches)


class Rows(Dataset):
    """A list of samples as a map-style dataset."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class Numbers(IterableDataset):
    """0, 1, ..., n-1 as a stream, the same on every rank."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(torch.arange(self.n))


def worst(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def report(run, case: dict) -> None:
    if run.rank == 0:
        print("RESULT " + json.dumps(case), flush=True)


def gpt2_case(strategy: str, loop: str) -> None:
    with scaletrain.init(strategy=strategy) as run:
        model = gpt2()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
        model, optimizer, scheduler = run.setup(model, optimizer, scheduler)
        loader = run.loader(Rows(lm_batches()), batch_size=GLOBAL_BATCH // run.world_size, shuffle=False)
        losses, norms = [], []
        for step, batch in zip(range(STEPS), loader):
            if loop == "train_step":
                loss = run.train_step(model, optimizer, batch, scheduler=scheduler, max_grad_norm=MAX_NORM)
            else:
                with run.accumulate(model):
                    loss = model(**batch).loss
                    run.backward(loss)
                norms.append(run.clip_grad_norm(model, MAX_NORM).item())
                run.step(optimizer, scheduler)
            losses.append(run.mean(loss.detach()).item())
        expected = gpt2_reference()
        state = {k: v.full_tensor() if hasattr(v, "full_tensor") else v
                 for k, v in run.unwrap(model).state_dict().items()}
        report(run, {"case": f"gpt2 {strategy} {loop}", "param_diff": worst(max_difference(state, expected["state"])),
                     "losses": losses, "expected_losses": expected["losses"], "norms": norms,
                     "expected_norms": expected["norms"], "lr": optimizer.param_groups[0]["lr"],
                     "expected_lr": expected["lr"]})


def pipeline_case() -> None:
    with scaletrain.init(strategy="pipeline", microbatches=2) as run:
        model = sequential()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        model, optimizer, scheduler = run.setup(model, optimizer, scheduler)
        for inputs, targets in xy_batches():
            run.train_step(model, optimizer, inputs, targets, scheduler=scheduler, max_grad_norm=MAX_NORM)
        expected = sequential_reference()
        mine = run.unwrap(model).state_dict()
        diff = max_difference(mine, {k: v for k, v in expected["state"].items() if k in mine})
        report(run, {"case": "pipeline clip+schedule", "param_diff": worst(diff), "lr": optimizer.param_groups[0]["lr"],
                     "expected_lr": expected["lr"]})


def fsdp_schedule_case(compile: bool = False) -> None:
    with scaletrain.init(strategy="fsdp", compile=compile) as run:
        model = sequential()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        model, optimizer, scheduler = run.setup(model, optimizer, scheduler)
        half = GLOBAL_BATCH // run.world_size
        for inputs, targets in xy_batches():
            mine = slice(run.rank * half, (run.rank + 1) * half)
            run.train_step(model, optimizer, inputs[mine], targets[mine], scheduler=scheduler, max_grad_norm=MAX_NORM)
        expected = sequential_reference()
        state = {k: v.full_tensor() for k, v in run.unwrap(model).state_dict().items()}
        report(run, {"case": "fsdp clip+schedule" + (" compiled" if compile else ""),
                     "param_diff": worst(max_difference(state, expected["state"])),
                     "lr": optimizer.param_groups[0]["lr"], "expected_lr": expected["lr"],
                     "graphs": compiled_graphs(), "sharded": run.describe().get("sharded_blocks")})


def compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def gan_case() -> None:
    with scaletrain.init(strategy="ddp") as run:
        generator, discriminator = gan_models()
        opt_g = torch.optim.SGD(generator.parameters(), lr=0.1)
        opt_d = torch.optim.SGD(discriminator.parameters(), lr=0.1)
        generator, opt_g = run.setup(generator, opt_g)
        discriminator, opt_d = run.setup(discriminator, opt_d)
        half = GLOBAL_BATCH // run.world_size
        for noise, real in gan_reference(inputs_only=True):
            mine = slice(run.rank * half, (run.rank + 1) * half)
            noise, real = noise[mine], real[mine]
            with run.accumulate(discriminator):
                scores = discriminator(torch.cat([real, generator(noise).detach()]))  # one forward: DDP's rule
                loss_d = scores[:half].mean() - scores[half:].mean()
                run.backward(loss_d)
            run.step(opt_d)
            with run.accumulate(generator):
                loss_g = discriminator(generator(noise)).mean()
                run.backward(loss_g)
            run.step(opt_g)  # the discriminator's gradients from this go when its accumulate() starts
        expected = gan_reference()
        diff = max(max_difference(run.unwrap(generator).state_dict(), expected["generator"]),
                   max_difference(run.unwrap(discriminator).state_dict(), expected["discriminator"]))
        report(run, {"case": "gan ddp", "param_diff": worst(diff)})


def stream_case() -> None:
    with scaletrain.init(strategy="ddp") as run:
        seen, batches = [], 0
        for epoch in range(2):
            loader = run.loader(Numbers(37), batch_size=4, num_workers=2)
            for batch in loader:
                seen.extend(batch.tolist())
                batches += 1
        gathered = [None] * run.world_size
        dist.all_gather_object(gathered, {"seen": seen, "batches": batches})
        report(run, {"case": "stream", "ranks": gathered})


if __name__ == "__main__":
    for strategy in ("ddp", "fsdp"):
        for loop in ("train_step", "hand-written"):
            gpt2_case(strategy, loop)
    pipeline_case()
    fsdp_schedule_case()
    fsdp_schedule_case(compile=True)
    gan_case()
    stream_case()
