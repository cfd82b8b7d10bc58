"""A language model's training step with the chunked loss (`chunked_loss=True`, the default)
against the plain one (`chunked_loss=False`): the step's peak memory and its time, on a model
with a 32,768-token vocabulary, where the logits outweigh everything else.

The model: a Hugging Face Llama built from a config (hidden 64, 2 layers, GQA 4/2 heads,
vocabulary 32,768), trained by `scaletrain.init(strategy="single", precision=...)` and
`run.train_step` with `labels` (the model's own loss, which scaletrain computes from its
logits); batch 4 × 2,048 tokens (8,192 tokens: eight of the default chunks of this
vocabulary, as a sequence of 8,192 tokens of a 128k vocabulary makes 32), in bf16 (autocast)
and fp32. The peak is the most bytes of tensors the step held
at once (`scaletrain.measure.live_bytes`: counted from the tensors, the same on every
machine), the time the median of 5 steps after 2; the two losses are printed side by side.

    python benchmarks/lm_loss_memory.py            # about two minutes on 2 CPU cores
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scaletrain  # noqa: E402
from scaletrain.measure.live_bytes import LiveBytes  # noqa: E402

VOCAB, BATCH, TOKENS = 32768, 4, 2048


def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=TOKENS,
                                        attn_implementation="sdpa", use_cache=False))


def measure(precision: str, chunked: bool) -> dict:
    ids = torch.randint(0, VOCAB, (BATCH, TOKENS), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids}
    with scaletrain.init(strategy="single", precision=precision, chunked_loss=chunked) as run:
        net = model()
        net, optimizer = run.setup(net, torch.optim.SGD(net.parameters(), lr=1e-3))
        for _ in range(2):
            run.train_step(net, optimizer, batch)
        with LiveBytes() as live:
            loss = float(run.train_step(net, optimizer, batch))
        times = []
        for _ in range(5):
            began = time.perf_counter()
            run.train_step(net, optimizer, batch)
            times.append(time.perf_counter() - began)
    return {"peak": live.peak, "loss": loss, "step": statistics.median(times)}


def main() -> None:
    logits = BATCH * TOKENS * VOCAB
    print(f"Llama, vocabulary {VOCAB:,}, {BATCH} × {TOKENS:,} tokens: the logits are {logits * 4 / 2**20:,.0f} MiB in "
          f"float32, {logits * 2 / 2**20:,.0f} MiB in bf16\n")
    print("| precision | loss | step's peak (tensors) | step time | loss value |")
    print("|---|---|---:|---:|---:|")
    for precision in ("bf16", "fp32"):
        plain, chunked = measure(precision, False), measure(precision, True)
        for name, r in (("plain", plain), ("chunked", chunked)):
            print(f"| {precision} | {name} | {r['peak'] / 2**20:,.0f} MiB | {r['step'] * 1e3:,.0f} ms | "
                  f"{r['loss']:.6f} |")
        print(f"| {precision} | chunked ÷ plain | {chunked['peak'] / plain['peak']:.2f}× | "
              f"{chunked['step'] / plain['step']:.2f}× | |")


if __name__ == "__main__":
    main()
