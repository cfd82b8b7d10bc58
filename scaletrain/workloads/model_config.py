"""`scaletrain train --model-config NAME|FILE`: a Hugging Face causal language model built from
a config (a transformers config.json, or the built-in llama3-8b/70b/405b and mixtral-8x7b
shapes: Llama 3.1's and Mixtral's configs), trained on synthetic tokens of `--seq-len` — the model the cluster planner plans,
run as it plans it (speed work: the tokens are random, the loss is the model's own). A mixture
of experts (Mixtral, Qwen3-MoE) trains with its router's balance loss: `output_router_logits`
on, so that the model's own loss adds `router_aux_loss_coef` (the config's; 0 turns it off)
times it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
from torch.utils.data import Dataset

from ..foundation.errors import UsageError

DEFAULT_SEQ_LEN = 2048
TRAIN_SEQUENCES = 1 << 16  # made on demand, one per index: none is held in memory


class SyntheticTokens(Dataset):
    """Random token sequences, the same for a seed and an index on every rank."""

    def __init__(self, count: int, seq_len: int, vocab: int, seed: int):
        self.count, self.seq_len, self.vocab, self.seed = count, seq_len, vocab, seed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        ids = torch.randint(0, self.vocab, (self.seq_len,), generator=generator)
        return {"input_ids": ids, "labels": ids}


def hf_config(name_or_file: str):
    """The transformers config of a built-in shape or a config.json (checked by the planner's
    reader: decoder-only, one line otherwise)."""
    from .model_shapes import BUILTIN, load_shape

    shape = load_shape(name_or_file)  # refuses encoders and unsupported configs in one line
    if name_or_file in BUILTIN and shape.experts:
        from transformers import MixtralConfig

        # Mixtral-8x7B-v0.1's config.json: RoPE base 1e6, no sliding window, balance loss 0.02
        return MixtralConfig(hidden_size=shape.hidden, intermediate_size=shape.expert_ffn,
                             num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                             num_key_value_heads=shape.kv_heads, num_local_experts=shape.experts,
                             num_experts_per_tok=shape.experts_per_token, vocab_size=shape.vocab,
                             max_position_embeddings=shape.max_positions, rope_theta=1e6, sliding_window=None,
                             router_aux_loss_coef=0.02, output_router_logits=True, tie_word_embeddings=False), shape
    if name_or_file in BUILTIN:
        from transformers import LlamaConfig

        return LlamaConfig(hidden_size=shape.hidden, intermediate_size=shape.ffn, num_hidden_layers=shape.layers,
                           num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                           vocab_size=shape.vocab, max_position_embeddings=shape.max_positions,
                           rope_theta=500000.0, tie_word_embeddings=False), shape
    from transformers import AutoConfig

    path = Path(name_or_file)
    data = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    kind = data.pop("model_type")
    if shape.experts:  # published configs turn it off, for inference
        data["output_router_logits"] = True
    return AutoConfig.for_model(kind, **data), shape


def model_config_workload(name_or_file: str, seq_len: Optional[int]):
    from . import Workload

    config, shape = hf_config(name_or_file)
    seq = seq_len or min(DEFAULT_SEQ_LEN, shape.max_positions)
    if seq > shape.max_positions:
        raise UsageError(f"--seq-len {seq} is longer than {shape.name}'s {shape.max_positions} positions "
                         f"(max_position_embeddings); give --seq-len {shape.max_positions} or less")

    def build_model():
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")

    def build_datasets(seed: int):
        return (SyntheticTokens(TRAIN_SEQUENCES, seq, shape.vocab, seed),
                SyntheticTokens(8, seq, shape.vocab, seed + 1))

    return Workload(f"{shape.name} (seq {seq}, synthetic tokens)", f"{shape.name} built from its config",
                    build_model, build_datasets, lr=3e-4, epochs=1, task="own")


def workload_for(config):
    """The workload a TrainConfig names: --model-config's, else the built-in (or the user's)."""
    from . import get_workload

    if getattr(config, "model_config", None):
        return model_config_workload(config.model_config, getattr(config, "seq_len", None))
    return get_workload(config.workload, config.model, config.dataset, getattr(config, "seq_len", None))
