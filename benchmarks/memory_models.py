"""Models for the memory benchmarks, as `--model memory_models:NAME` factories (run from benchmarks/).

- mlp134: a user's MLP of 134 MB (33.6 M fp32 parameters) over 32×32 colour images (the
  synthetic-cnn and synthetic-mlp workloads' data), as an nn.Sequential of named blocks so that
  every strategy, the pipeline included, takes it;
- llama: a Hugging Face Llama built from a config (nothing downloaded), byte-level (vocabulary
  256) for the stdlib-gpt workload's text;
- deep_mlp: an MLP of `SCALETRAIN_BIG_BLOCKS` blocks of `SCALETRAIN_BIG_WIDTH`² (default 8 of
  4096², 64 MB each): a model whose parameters alone exceed one process's memory budget in
  benchmarks/meta_init_check.py.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from torch import nn


def mlp134() -> nn.Sequential:
    return nn.Sequential(OrderedDict(
        fc1=nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4096), nn.ReLU()),
        fc2=nn.Sequential(nn.Linear(4096, 4096), nn.ReLU()),
        fc3=nn.Sequential(nn.Linear(4096, 1024), nn.ReLU()),
        fc4=nn.Linear(1024, 10),
    ))


def llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=64,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config)


def deep_mlp() -> nn.Sequential:
    blocks = int(os.environ.get("SCALETRAIN_BIG_BLOCKS", "8"))
    width = int(os.environ.get("SCALETRAIN_BIG_WIDTH", "4096"))
    layers = [("inp", nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, width), nn.ReLU()))]
    layers += [(f"b{i}", nn.Sequential(nn.Linear(width, width), nn.ReLU())) for i in range(blocks)]
    layers.append(("out", nn.Linear(width, 10)))
    return nn.Sequential(OrderedDict(layers))
