"""FLOPs of torch's grouped matrix products (`_grouped_mm`, `_scaled_grouped_mm`): the kernel a
mixture of experts runs its experts with — Hugging Face's Mixtral and Qwen3-MoE (their
`grouped_mm` experts, the default), torchtitan's. torch's FLOP counter has no formula for them
and counts them as 0, so a MoE run's MFU would leave out its experts, most of its work.

Each group is an ordinary product, 2·m·k·n; the groups' sizes come from the offsets, but the
sum over the groups depends only on the shapes (the ragged dimension's total):

    a 2-D (M, K_total) · b 2-D (K_total, N) → (G, M, N)   (a weight's gradient): 2·M·K_total·N
    a 2-D (M_total, K) · b 3-D (G, K, N)    → (M_total, N) (the experts' forward):  2·M_total·K·N
    a 3-D (G, M, K)    · b 2-D (K, N_total) → (M, N_total):                          2·M·K·N_total
    a 3-D (G, M, K)    · b 3-D (G, K, N)    → (G, M, N)   (a batched product):      2·G·M·K·N
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def grouped_mm_flops(a_shape, b_shape) -> int:
    if len(a_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[-1]
    if len(b_shape) == 2:
        return 2 * a_shape[1] * a_shape[2] * b_shape[1]
    return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]


def _formula(mat_a, mat_b, *args, out_val=None, **kwargs) -> int:
    return grouped_mm_flops(tuple(mat_a.shape), tuple(mat_b.shape))


_formula._get_raw = True  # FlopCounterMode: the arguments as they are (their first two are the matrices)

#: {operator packet: its raw formula}, for the grouped products this torch has.
GROUPED_MM_FLOPS = {getattr(aten, name): _formula for name in ("_grouped_mm", "_scaled_grouped_mm")
                    if hasattr(aten, name)}
