"""A decoder-only transformer's shape, from a Hugging Face `config.json` or a built-in name
(the Llama 3.1 8B, 70B and 405B shapes; Mixtral 8×7B, a mixture of experts), checked: what the
planner builds and traces.

Two families cover the decoder-only models people train: Llama-style (RMSNorm, rotary
positions, a gated SiLU feed-forward, no biases: Llama, Mistral, Qwen2/3, Gemma-like) and
GPT-style (LayerNorm, learned positions or none, a GELU feed-forward with biases: GPT-2,
GPT-J/NeoX-like, MPT). An encoder or encoder-decoder config is refused in one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ..foundation.errors import UsageError

#: model_type values of each family (transformers' names).
LLAMA_STYLE = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "olmo", "olmo2", "phi3", "granite",
               "cohere", "starcoder2", "internlm2", "deepseek", "yi", "smollm3"}
GPT_STYLE = {"gpt2", "gpt_neox", "gptj", "gpt_neo", "mpt", "opt", "bloom", "falcon", "gpt_bigcode", "codegen", "phi"}
ENCODERS = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta", "t5",
            "mt5", "bart", "mbart", "marian", "pegasus", "vit", "clip", "whisper", "wav2vec2", "camembert", "mpnet"}


@dataclass(frozen=True)
class ModelShape:
    name: str
    family: str  # "llama" or "gpt"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_positions: int
    tie_embeddings: bool = False
    bias: bool = False  # GPT-style: biases on every linear layer
    learned_positions: bool = False
    dropout: float = 0.0
    experts: int = 0
    """A mixture of experts' experts per layer (0: a dense feed-forward of `ffn`)."""
    experts_per_token: int = 0
    """The top-k experts each token is routed to."""
    expert_ffn: int = 0
    """Each expert's hidden units."""

    @property
    def parameters(self) -> int:
        """Parameter count (weights, biases and norms), as the model built from it holds."""
        h, d = self.hidden, self.head_dim
        attention = h * d * (self.heads + 2 * self.kv_heads) + self.heads * d * h
        mlp = (3 if self.family == "llama" else 2) * h * self.ffn
        if self.experts:  # every expert's gated feed-forward, and the router
            mlp = 3 * h * self.expert_ffn * self.experts + h * self.experts
        norms = 2 * h * (1 if self.family == "llama" else 2)
        biases = (d * (self.heads + 2 * self.kv_heads) + h + self.ffn + h) if self.bias else 0
        layer = attention + mlp + norms + biases
        embed = self.vocab * h + (self.max_positions * h if self.learned_positions else 0)
        head = 0 if self.tie_embeddings else self.vocab * h
        return self.layers * layer + embed + head + h * (1 if self.family == "llama" else 2)

    @property
    def layer_parameters(self) -> int:
        return (self.parameters - self.embedding_parameters - self.head_parameters) // self.layers

    @property
    def expert_parameters(self) -> int:
        """One layer's experts, all of them (0 for a dense model): what expert parallel splits."""
        return 3 * self.hidden * self.expert_ffn * self.experts

    @property
    def active_parameters(self) -> int:
        """The parameters one token computes with: a mixture's top-k experts of every layer, not
        all of them (the N of published MoE MFU figures: torchtitan's, Megatron-LM's)."""
        idle = self.experts - self.experts_per_token
        return self.parameters - self.layers * 3 * self.hidden * self.expert_ffn * max(0, idle)

    @property
    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden + (self.max_positions * self.hidden if self.learned_positions else 0)

    @property
    def head_parameters(self) -> int:
        return 0 if self.tie_embeddings else self.vocab * self.hidden


def _llama31(name, hidden, layers, heads, ffn) -> ModelShape:
    # Meta's Llama 3.1 configs (params.json / config.json): 8 key-value heads, vocabulary
    # 128,256, 131,072 positions, untied embeddings.
    return ModelShape(name, "llama", hidden, layers, heads, 8, hidden // heads, ffn, 128256, 131072)


def _mixtral(name, hidden, layers, heads, kv_heads, experts, top_k, expert_ffn, vocab, positions) -> ModelShape:
    # Mistral AI's Mixtral configs (config.json of mistralai/Mixtral-8x7B-v0.1): every layer a
    # mixture of gated SiLU experts, untied embeddings.
    return ModelShape(name, "llama", hidden, layers, heads, kv_heads, hidden // heads, expert_ffn, vocab, positions,
                      experts=experts, experts_per_token=top_k, expert_ffn=expert_ffn)


BUILTIN = {
    "llama3-8b": _llama31("llama3-8b", 4096, 32, 32, 14336),
    "llama3-70b": _llama31("llama3-70b", 8192, 80, 64, 28672),
    "llama3-405b": _llama31("llama3-405b", 16384, 126, 128, 53248),
    "mixtral-8x7b": _mixtral("mixtral-8x7b", 4096, 32, 32, 8, 8, 2, 14336, 32000, 32768),
}


def load_shape(name_or_file: str) -> ModelShape:
    """A built-in shape by name, or a transformers config.json."""
    if name_or_file in BUILTIN:
        return BUILTIN[name_or_file]
    path = Path(name_or_file)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise UsageError(f"--model-config {name_or_file}: neither a built-in ({', '.join(BUILTIN)}) nor a "
                         "config.json file")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--model-config {name_or_file}: not a readable JSON config ({exc})") from None
    return shape_from_config(config, path.stem if path.name != "config.json" else path.parent.name or "model")


def _get(config: dict, *names, default=None):
    for n in names:
        if config.get(n) is not None:
            return config[n]
    return default


def shape_from_config(config: dict, name: str = "model") -> ModelShape:
    if not isinstance(config, dict):
        raise UsageError(f"--model-config {name}: a model's config.json is a JSON object ({{\"model_type\": ...}}), "
                         f"not a {type(config).__name__}")
    kind = str(config.get("model_type", "")).lower()
    archs = " ".join(config.get("architectures") or [])
    where = f"--model-config {name}"
    if kind in ENCODERS or config.get("is_encoder_decoder") or (archs and "CausalLM" not in archs
                                                                  and "LMHead" not in archs and not kind):
        raise UsageError(f"{where}: model_type {kind or archs!r} is an encoder or encoder-decoder model; the "
                         "cluster planner costs decoder-only language models (Llama-, Mistral-, Qwen- or GPT-style)")
    if kind in LLAMA_STYLE or (not kind and "Llama" in archs):
        family = "llama"
    elif kind in GPT_STYLE:
        family = "gpt"
    else:
        raise UsageError(f"{where}: model_type {kind!r} is not supported; supported are "
                         f"{', '.join(sorted(LLAMA_STYLE | GPT_STYLE))} (decoder-only)")
    try:
        hidden = int(_get(config, "hidden_size", "n_embd", "d_model"))
        layers = int(_get(config, "num_hidden_layers", "n_layer", "n_layers"))
        heads = int(_get(config, "num_attention_heads", "n_head", "n_heads"))
        kv = int(_get(config, "num_key_value_heads", "num_kv_heads", default=heads) or heads)
        head_dim = int(_get(config, "head_dim", default=hidden // heads) or hidden // heads)
        ffn = int(_get(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden) or 4 * hidden)
        vocab = int(_get(config, "vocab_size"))
        positions = int(_get(config, "max_position_embeddings", "n_positions", "max_seq_len", "n_ctx",
                             default=2048))
    except (TypeError, ValueError):
        raise UsageError(f"{where}: the config lacks hidden_size, num_hidden_layers, num_attention_heads or "
                         "vocab_size (or their GPT-2 names n_embd, n_layer, n_head)") from None
    sizes = {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
             "num_key_value_heads": kv, "head_dim": head_dim, "intermediate_size": ffn, "vocab_size": vocab,
             "max_position_embeddings": positions}
    wrong = [f"{key} {value}" for key, value in sizes.items() if value < 1]
    if wrong:
        raise UsageError(f"{where}: {', '.join(wrong)}: every size of the model must be a positive whole number")
    if heads % kv:
        raise UsageError(f"{where}: {heads} attention heads do not divide into {kv} key-value heads")
    experts = int(_get(config, "num_local_experts", "num_experts", default=0) or 0)
    if experts and kind == "qwen3_moe" and (config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1):
        raise UsageError(f"{where}: a Qwen3-MoE whose layers are not all mixtures (mlp_only_layers, "
                         "decoder_sparse_step) is not supported; give every layer experts")
    gpt = family == "gpt"
    return ModelShape(name=name, family=family, hidden=hidden, layers=layers, heads=heads, kv_heads=kv,
                      head_dim=head_dim, ffn=ffn, vocab=vocab, max_positions=positions,
                      tie_embeddings=bool(config.get("tie_word_embeddings", gpt)),
                      bias=gpt and not config.get("no_bias", False), learned_positions=kind in ("gpt2", "opt",
                                                                                               "gpt_bigcode"),
                      dropout=float(_get(config, "resid_pdrop", "hidden_dropout", default=0.0) or 0.0) if gpt else 0.0,
                      experts=experts, experts_per_token=int(_get(config, "num_experts_per_tok", default=2)) if experts
                      else 0, expert_ffn=int(_get(config, "moe_intermediate_size", default=ffn)) if experts else 0)


def megatron_gpt(hidden: int, layers: int, heads: int, vocab: int = 51200, seq: int = 2048,
                 name: Optional[str] = None) -> ModelShape:
    """Megatron-LM's GPT (arXiv 2104.04473): GPT-2's shape, 4h feed-forward, vocabulary 51,200,
    dropout 0.1."""
    return ModelShape(name or f"gpt-{hidden}x{layers}", "gpt", hidden, layers, heads, heads, hidden // heads,
                      4 * hidden, vocab, seq, tie_embeddings=True, bias=True, learned_positions=True, dropout=0.1)


def with_layers(shape: ModelShape, layers: int) -> ModelShape:
    return replace(shape, layers=layers)
