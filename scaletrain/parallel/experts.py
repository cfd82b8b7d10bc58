"""A mixture of experts' experts, found in a model by their form: a module holding every
expert's weights stacked in two 3-D parameters — `gate_up_proj` (experts, 2 × hidden units,
width: each expert's gate and up projections, concatenated) and `down_proj` (experts, width,
hidden units) — called as `experts(hidden_states, top_k_index, top_k_weights)` with the
router's choice of experts for every token and their weights. Hugging Face's Mixtral, Qwen3-MoE
(and their kin: `MixtralExperts`, `Qwen3MoeExperts`) store them so, and so does the built-in
`stdlib-moe` (`workloads/moe_gpt.py`).

What expert parallel needs of them is here: which modules they are, how many experts each
holds, whether their layout is the one it computes (gated, concatenated, not transposed, no
biases), and the one line refusing a model or a degree it cannot split.
"""

from __future__ import annotations

import torch
from torch import nn

from ..foundation.errors import UsageError, arg

#: The stacked weights of the experts, as the experts module names them.
WEIGHTS = ("gate_up_proj", "down_proj")

#: Hugging Face's experts layouts (`use_experts_implementation`) expert parallel computes: the
#: gate and up projections concatenated in one tensor, not transposed, no biases.
SUPPORTED_LAYOUT = {"has_gate": True, "is_concatenated": True, "is_transposed": False, "has_bias": False}


def is_experts(module: nn.Module) -> bool:
    """Whether `module` holds a mixture's experts in the stacked form (see the module's text)."""
    weights = [module._parameters.get(name) for name in WEIGHTS]
    return (all(isinstance(w, torch.Tensor) and w.dim() == 3 for w in weights)
            and weights[0].shape[0] == weights[1].shape[0])


def expert_modules(model: nn.Module) -> dict[str, nn.Module]:
    """{path: experts module} of every mixture-of-experts layer of `model`, in order."""
    return {path: module for path, module in model.named_modules() if is_experts(module)}


def expert_count(module: nn.Module) -> int:
    return int(module._parameters["gate_up_proj"].shape[0])


def is_mixture(model: nn.Module) -> bool:
    return bool(expert_modules(model))


def check_expert_parallel(model: nn.Module, ep: int) -> None:
    """Refuses, in one line, a model expert parallel cannot split `ep` ways: one without
    experts, experts that do not divide into `ep` equal groups, or a layout it does not
    compute. Reads the model's structure only (a model built on the meta device serves)."""
    if ep == 1:
        return
    found = expert_modules(model)
    if not found:
        raise UsageError(f"{arg('ep', ep)} splits a mixture of experts' experts across processes, but "
                         f"{type(model).__name__} has none (no module holding stacked gate_up_proj and down_proj "
                         f"experts, as Mixtral, Qwen3-MoE and stdlib-moe do): drop {arg('ep')}, or train a "
                         "mixture-of-experts model")
    for path, module in found.items():
        count = expert_count(module)
        if count % ep:
            fits = [d for d in range(2, count + 1) if count % d == 0]
            raise UsageError(f"{arg('ep', ep)}: {path} holds {count} experts, which do not split into {ep} equal "
                             f"groups; use {' or '.join(arg('ep', d) for d in fits) or 'no ' + arg('ep')} (a divisor "
                             f"of {count})")
        for flag, wanted in SUPPORTED_LAYOUT.items():
            if getattr(module, flag, wanted) != wanted:
                raise UsageError(f"{arg('ep', ep)}: {path} ({type(module).__name__}) stores its experts with "
                                 f"{flag}={not wanted}, a layout expert parallel does not compute (it computes "
                                 f"gated experts whose gate and up projections are concatenated, untransposed, "
                                 f"without biases); drop {arg('ep')} for this model")
