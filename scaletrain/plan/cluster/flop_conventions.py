"""A step's FLOPs in the convention published MFU figures use, beside torch's counter's.

torch's FLOP counter (the planner's trace, a run's `model_flops_per_step`) counts what the
kernels compute: every matrix product, and attention's whole score matrix forward (4·s²·d per
head) and 2.5 × that backward, a causal mask or not. Published MFU figures mostly use PaLM's
convention (arXiv 2204.02311, Appendix B), as nanoGPT, torchtitan and fms-fsdp implement it:

    6·N + 12·L·H·Q·T FLOPs per token

N the parameters (torchtitan, since April 2024: without the input embedding, whose lookup
computes nothing; the output layer counted, tied embeddings once; of a mixture of experts the
active ones, each token's top-k experts, as torchtitan's and Megatron-LM's MoE figures count),
L layers, H·Q the attention
width (heads × head size), T the sequence length; attention not halved for causal masking,
recomputation not counted. Megatron-LM's paper (arXiv 2104.04473, eq. 3) counts the same
products plus the recomputation of full activation checkpointing (its "hardware" TFLOP/s);
NVIDIA's NeMo and Megatron-LM halve causal attention from 2025 (see docs/cluster-planning.md).
"""

from __future__ import annotations

from ...workloads.model_shapes import ModelShape

PUBLISHED_CONVENTION = ("PaLM's 6·N + 12·L·H·Q·T per token (N without the input embedding, causal attention "
                        "not halved, recomputation not counted)")


def published_flops_per_token(shape: ModelShape, seq: int) -> float:
    counted = shape.active_parameters - (0 if shape.tie_embeddings else shape.vocab * shape.hidden)
    if shape.learned_positions:
        counted -= shape.max_positions * shape.hidden  # a lookup too
    return 6.0 * counted + 12.0 * shape.layers * shape.heads * shape.head_dim * seq
