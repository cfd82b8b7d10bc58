"""A Hugging Face GPT-2 (built from a config: nothing is downloaded) trained with
scaletrain: dict batches, the model's own loss, a learning-rate schedule, gradient
clipping, and a hand-written loop. Needs `pip install transformers`.

    python examples/train_gpt2.py                                   # one process
    scaletrain launch --nproc-per-node 2 examples/train_gpt2.py     # ddp on 2 processes
    scaletrain launch --nproc-per-node 2 examples/train_gpt2.py --strategy fsdp
"""

import argparse
import sysconfig
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import scaletrain

CONTEXT = 64


class SourceWindows(torch.utils.data.Dataset):
    """Windows of bytes of a Python source file, as a tokenizer's output would look:
    {"input_ids", "attention_mask", "labels"} (the model shifts the labels itself)."""

    def __init__(self, path: Path, first: int, count: int):
        data = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).long()
        self.windows = [data[i:i + CONTEXT] for i in range(first * CONTEXT, (first + count) * CONTEXT, CONTEXT)]

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, i):
        ids = self.windows[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()

    source = Path(sysconfig.get_paths()["stdlib"]) / "argparse.py"
    with scaletrain.init(strategy=args.strategy, seed=0) as run:
        train_set, held_out = SourceWindows(source, 0, 600), SourceWindows(source, 600, 64)
        config = GPT2Config(vocab_size=256, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4)
        model = GPT2LMHeadModel(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 10))
        model, optimizer, scheduler = run.setup(model, optimizer, scheduler)
        loader = run.loader(train_set, batch_size=16, shuffle=True)

        step, first_loss = 0, None
        while step < args.steps:
            for batch in loader:  # dicts of tensors, already on run.device
                with run.accumulate(model):  # skips gradient sync on accumulation micro-steps
                    loss = model(**batch).loss  # the model's own loss
                    run.backward(loss)  # scaled for accumulation (and fp16)
                run.clip_grad_norm(model, 1.0)  # the whole model's norm, across shards
                run.step(optimizer, scheduler)
                step += 1
                first_loss = first_loss if first_loss is not None else run.mean(loss.detach())
                if step == args.steps:
                    break
        result = run.evaluate(model, held_out, batch_size=32, metrics=["loss", "perplexity"])
        run.print(f"{args.strategy} × {run.world_size}: training loss {first_loss:.3f} → {run.mean(loss.detach()):.3f}; "
                  f"held-out loss {result['loss']:.3f}, perplexity {result['perplexity']:.1f} "
                  f"({result['count']} windows)")


if __name__ == "__main__":
    main()
