"""`chunked_loss=True` (the default): a language model's loss computed without ever holding the
whole float32 logits (data/lm_loss.py) — the trainer's `lm` task, a tensor output's fallback
cross-entropy, and a Hugging Face causal language model's own loss.

A Hugging Face model given `labels` computes its loss itself, upcasting every logit to
float32 at once. Where its loss is transformers' standard causal-LM loss (`ForCausalLMLoss`,
what Llama, Mistral, Qwen, Gemma and most causal LMs use), scaletrain takes the labels (and
`shift_labels`, `num_items_in_batch`, as context parallel passes them) out of the call, lets
the model return its logits, and puts on its output the same loss computed chunk by chunk:
transformers' semantics (labels shifted by one, -100 ignored, mean or sum ÷ items), to
float round-off, with a mixture of experts' router balance loss added as the model adds it. A
model with a loss of its own is left to it. Applied before the
data-parallel wrappers (hooks on the model itself, under any wrapper); not to pipeline
stages, whose loss the schedule computes.
"""

from __future__ import annotations

from torch import nn

from ..data.lm_loss import causal_lm_loss
from .config import ParallelConfig
from .part import ModelPart

TAKEN = ("labels", "shift_labels", "num_items_in_batch")


def standard_causal_lm(module: nn.Module) -> bool:
    """A Hugging Face model whose loss is transformers' `ForCausalLMLoss`."""
    if not any(cls.__name__ == "PreTrainedModel" for cls in type(module).__mro__):
        return False
    try:
        from transformers.loss.loss_utils import ForCausalLMLoss
    except ImportError:
        return False
    return getattr(type(module), "loss_function", None) is not None and module.loss_function is ForCausalLMLoss


class _OwnLoss:
    """The hooks: labels out of the call before it, the loss onto its output after it."""

    def __init__(self):
        self.pending: list = []  # a stack: one entry per call in progress

    def before(self, module, args, kwargs):
        taken = {name: kwargs.pop(name) for name in TAKEN if name in kwargs}
        self.pending.append(taken if taken.get("labels") is not None or taken.get("shift_labels") is not None
                            else None)
        return args, kwargs

    def after(self, module, args, kwargs, output):
        taken = self.pending.pop() if self.pending else None
        logits = getattr(output, "logits", None)
        if taken is None or logits is None:
            return output
        loss = causal_lm_loss(logits, taken.get("labels"), taken.get("shift_labels"),
                              taken.get("num_items_in_batch"), chunked=True)
        # A mixture of experts adds its router's balance loss to the loss it computes from
        # labels (Mixtral's, Qwen3-MoE's: `router_aux_loss_coef` × `aux_loss`); without the
        # labels it only returns it, so it is added here as the model would have.
        aux = getattr(output, "aux_loss", None)
        coef = getattr(getattr(module, "config", None), "router_aux_loss_coef", None)
        if aux is not None and coef:
            loss = loss + coef * aux.to(loss.device)
        output["loss"] = loss
        return output


def take_over_loss(module: nn.Module) -> bool:
    """Installs the hooks on a standard causal LM; False where the model keeps its own loss."""
    if not standard_causal_lm(module):
        return False
    hooks = _OwnLoss()
    module.register_forward_pre_hook(hooks.before, with_kwargs=True)
    module.register_forward_hook(hooks.after, with_kwargs=True)
    return True


class ChunkedLoss:
    name = "chunked_loss"

    def enabled(self, config: ParallelConfig) -> bool:
        return bool(config.option("chunked_loss", True)) and not config.pipelined

    def apply(self, part: ModelPart, config: ParallelConfig, topology) -> None:
        if take_over_loss(part.module):
            part.banner.append(f"chunked loss: {type(part.module).__name__}'s own loss computed from its logits a "
                               "chunk of tokens at a time (never all the float32 logits at once)")
