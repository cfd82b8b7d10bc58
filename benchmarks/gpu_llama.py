"""The Llama-style model and data the GPU benchmarks share (gpu_vs_torchtitan.py,
gpu_float8_check.py): one architecture, built as a Hugging Face `LlamaForCausalLM` from a
config for scaletrain and as torchtitan's own Llama 3 for torchtitan; synthetic token streams
the model can learn (each token mostly follows from the one before); the model FLOPs of a
token; the GPU's peak.

Sizes (parameters with the untied output head):
    1b     dim 2048, 16 layers, 32 heads (8 KV), FFN 8192, vocab 128256: 1.50 B
    f8     dim 4096, 4 layers, 32 heads (8 KV), FFN 14336, vocab 32768: 1.08 B (large matrices: float8's case)
    tiny   dim 64, 2 layers, 4 heads (2 KV), FFN 256, vocab 256 (the CPU dry run)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Arch:
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int  # the SwiGLU hidden size
    vocab: int
    multiple_of: int  # torchtitan's rounding of the FFN size; ffn_dim_multiplier below gives `ffn` exactly
    ffn_dim_multiplier: float
    rope_theta: float = 500000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def parameters(self) -> int:
        attn = self.dim * self.dim * 2 + 2 * self.dim * self.kv_heads * self.head_dim
        block = attn + 3 * self.dim * self.ffn + 2 * self.dim
        return self.layers * block + 2 * self.vocab * self.dim + self.dim

    def flops_per_token(self, seq_len: int) -> float:
        """Model FLOPs of one trained token (forward and backward; recomputation not counted):
        6 × the parameters outside the embedding, + the attention's 12 · L · H · Q · T
        (torchtitan's and Megatron's formula, so both frameworks are measured alike)."""
        return 6 * (self.parameters() - self.vocab * self.dim) + 12 * self.layers * self.heads * self.head_dim * seq_len


SIZES = {
    "1b": Arch(dim=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, multiple_of=1024,
               ffn_dim_multiplier=1.5),
    "f8": Arch(dim=4096, layers=4, heads=32, kv_heads=8, ffn=14336, vocab=32768, multiple_of=1024,
               ffn_dim_multiplier=1.3),
    "tiny": Arch(dim=64, layers=2, heads=4, kv_heads=2, ffn=256, vocab=256, multiple_of=256, ffn_dim_multiplier=1.5),
}


def torchtitan_ffn(arch: Arch) -> int:
    """The FFN size torchtitan derives from dim, multiple_of and ffn_dim_multiplier."""
    hidden = int(2 * 4 * arch.dim / 3)
    hidden = int(arch.ffn_dim_multiplier * hidden)
    return arch.multiple_of * ((hidden + arch.multiple_of - 1) // arch.multiple_of)


def hf_model(arch: Arch, device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=arch.vocab, hidden_size=arch.dim, intermediate_size=arch.ffn,
                         num_hidden_layers=arch.layers, num_attention_heads=arch.heads,
                         num_key_value_heads=arch.kv_heads, rope_theta=arch.rope_theta, rms_norm_eps=1e-5,
                         max_position_embeddings=131072, tie_word_embeddings=False, attn_implementation="sdpa",
                         use_cache=False)
    with torch.device(device):
        return LlamaForCausalLM(config)


def torchtitan_args(arch: Arch, seq_len: int):
    from torchtitan.models.llama3 import TransformerModelArgs

    assert torchtitan_ffn(arch) == arch.ffn, (torchtitan_ffn(arch), arch.ffn)
    return TransformerModelArgs(dim=arch.dim, n_layers=arch.layers, n_heads=arch.heads, n_kv_heads=arch.kv_heads,
                                vocab_size=arch.vocab, multiple_of=arch.multiple_of,
                                ffn_dim_multiplier=arch.ffn_dim_multiplier, rope_theta=arch.rope_theta,
                                max_seq_len=seq_len)


def token_batches(arch: Arch, seq_len: int, batch: int, steps: int, seed: int = 0) -> torch.Tensor:
    """[steps, batch, seq_len + 1] tokens: each follows from the one before by a fixed random
    map 90% of the time, else is drawn at random — a stream a model learns in tens of steps."""
    gen = torch.Generator().manual_seed(seed)
    follow = torch.randperm(arch.vocab, generator=gen)
    out = torch.empty(steps, batch, seq_len + 1, dtype=torch.long)
    out[..., 0] = torch.randint(0, arch.vocab, (steps, batch), generator=gen)
    noise = torch.rand(steps, batch, seq_len + 1, generator=gen) < 0.1
    random = torch.randint(0, arch.vocab, (steps, batch, seq_len + 1), generator=gen)
    for t in range(1, seq_len + 1):
        out[..., t] = torch.where(noise[..., t], random[..., t], follow[out[..., t - 1]])
    return out


#: bf16 dense peak FLOP/s by the device name's model, used only for a GPU scaletrain's hardware
#: profiles do not name (the vendor's data-sheet figures, without sparsity).
_PEAK_BF16 = (("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100 NVL", 835.0e12), ("H100", 989.4e12),
              ("B200", 2250e12), ("A100", 312e12), ("L40S", 362.05e12), ("L4", 121e12))


def peak_flops(device_name: str) -> tuple[float | None, str]:
    """(the GPU's bf16 dense peak in FLOP/s, where it came from)."""
    try:
        from scaletrain.hardware import for_device_name  # the hardware profiles

        profile, _why = for_device_name(device_name)
        if profile is not None and profile.peak("bf16"):
            return float(profile.peak("bf16")), f"scaletrain's hardware profile {profile.name}"
    except ImportError:  # an older scaletrain: the data sheet below
        pass
    for key, value in _PEAK_BF16:
        if key in device_name:
            return value, f"data sheet ({key} bf16 dense)"
    return None, f"unknown GPU {device_name!r}: no MFU"


def describe(arch: Arch) -> dict:
    return {**asdict(arch), "parameters": arch.parameters()}
