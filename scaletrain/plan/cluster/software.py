"""The software a predicted run uses, as far as it changes the step: torch's version, the
attention kernel, the loss's implementation, the layers' memory-bound kernels (eager torch
operators or fused ones), grouped-query attention's keys and values (expanded to every head
or not), FSDP's gradient-reduction dtype and torch.compile.

The default is what `scaletrain train` itself runs on that GPU: today's torch (the version
the profile's calibration was measured with), attention by `scaled_dot_product_attention`
(whatever kernel that torch picks on that GPU, as the calibration timed it), a chunked
cross-entropy that never holds the whole fp32 logits, RMSNorm by torch's fused kernel and
Hugging Face's eager rotary embeddings, keys and values not expanded (SDPA's `enable_gqa`),
gradients reduced in fp32, eager. A plan of another run names its software (`plan --hardware --torch 2.1 --attention
flash2 --loss fused ...`); what each value means for the prediction is in
docs/cluster-planning.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ...foundation.errors import UsageError, arg

#: --attention: `sdpa` is torch's scaled_dot_product_attention with the kernel that torch picks
#: on that GPU; the others name a kernel (flash1/2/3: FlashAttention 1, 2 and 3, `cudnn`:
#: cuDNN's fused attention, `triton`: the Triton FlashAttention of its time); `sdpa-math` is
#: attention as two batched products and a softmax (torch's math path, Megatron-LM's and
#: GPT-2's own).
ATTENTION = ("sdpa", "flash1", "flash2", "flash3", "cudnn", "triton", "sdpa-math")
#: --loss: `chunked` upcasts and computes the cross-entropy a chunk of tokens at a time under
#: checkpointing (scaletrain's); `fused` one kernel that writes the logits' gradient in the
#: forward (flash-attn's, Liger's, Megatron-LM's vocabulary-parallel one); `eager`
#: `cross_entropy(logits.float())` (Hugging Face's and torchtitan's).
LOSS = ("chunked", "fused", "eager")
#: --layer-kernels: `norms` runs RMSNorm as torch's fused kernel and the rest of a layer's
#: memory-bound operators eagerly (scaletrain's: its fused_norms); `eager` all of them as torch
#: operators (Hugging Face's code, torchtitan's of 2024); `fused` norms, rotary embeddings and
#: SwiGLU as fused kernels (Apex, Transformer Engine, flash-attn's layers, Liger).
LAYER_KERNELS = ("norms", "eager", "fused")
GQA = ("native", "expanded")
REDUCE_DTYPES = ("fp32", "bf16")

#: torch versions at which scaled_dot_product_attention's kernel on a GPU changed: FlashAttention
#: (v1) in torch 2.0 and 2.1, FlashAttention-2 from 2.2 (torch 2.2's release notes), and on
#: Hopper cuDNN's attention preferred again from 2.10 where the bundled cuDNN is new enough
#: (torch's sdp_utils.cpp, check_prefer_cudnn_attention) — what a calibration with today's torch
#: measures.
SDPA_FROM = (2, 0)
SDPA_FLASH2_FROM = (2, 2)
SDPA_CUDNN_FROM = (2, 10)
#: scaled_dot_product_attention takes grouped keys and values (enable_gqa) from torch 2.5; before,
#: model code expanded them to every head (repeat_kv).
SDPA_GQA_FROM = (2, 5)
#: The Triton FlashAttention of the FlashAttention-3 paper's figure (2024) goes with torch 2.3's
#: generation and later; an older run's Triton kernel is flash-attn's of 2022–23.
TRITON_2024_FROM = (2, 3)


@dataclass(frozen=True)
class Software:
    torch: str = ""
    """MAJOR.MINOR, or "" for the torch the profile's calibration was measured with (today's)."""
    attention: str = "sdpa"
    loss: str = "chunked"
    compile: bool = False
    """torch.compile: the blocks' memory-bound operators fused (the loss stays eager)."""
    layer_kernels: str = "norms"
    """Norms, rotary embeddings and SwiGLU as eager torch operators or fused kernels (LAYER_KERNELS;
    compile fuses them all)."""
    gqa: str = ""
    """"native", "expanded", or "" for what the attention kernel does (see `kv_expanded`)."""
    reduce_dtype: str = "fp32"
    """The dtype FSDP and DDP reduce gradients in (FSDP1's MixedPrecision default: the parameters')."""

    def version(self, profile) -> tuple:
        """(major, minor) of the torch this run uses."""
        return parse_version(self.torch) if self.torch else calibrated_version(profile)

    def attention_kernel(self, profile) -> str:
        """The kernel that runs the attention: `calibrated` (the one the profile's calibration
        timed, SDPA's pick with today's torch), a published kernel's name, or `sdpa-math`."""
        version = self.version(profile)
        if self.attention == "triton" and version < TRITON_2024_FROM:
            return "triton-2023"  # flash-attn's Triton kernel of its time (hardware/kernels.py)
        if self.attention != "sdpa":
            return self.attention
        if version < SDPA_FROM:
            return "sdpa-math"  # no scaled_dot_product_attention: attention as torch's operators
        if version < SDPA_FLASH2_FROM:
            return "flash1"
        calibration = getattr(profile, "calibration", None)
        if calibration is not None and calibration.attention and version >= calibrated_version(profile):
            return "calibrated"
        hopper = getattr(profile, "architecture", "") == "sm90"
        return "cudnn" if hopper and version >= SDPA_CUDNN_FROM else "flash2"

    def kv_expanded(self, profile) -> bool:
        """Whether grouped-query attention's keys and values are copied to every head before the
        kernel: FlashAttention-2 and 3 and cuDNN take them grouped, as SDPA does from torch 2.5
        (enable_gqa); FlashAttention (v1), the Triton kernel of 2022–23, the math path and
        older SDPA need them expanded."""
        if self.gqa:
            return self.gqa == "expanded"
        if self.attention_kernel(profile) in ("sdpa-math", "flash1", "triton-2023"):
            return True
        return self.attention == "sdpa" and self.version(profile) < SDPA_GQA_FROM

    @property
    def fused_layers(self) -> bool:
        return self.compile or self.layer_kernels == "fused"

    @property
    def fused_norms(self) -> bool:
        return self.fused_layers or self.layer_kernels == "norms"

    def describe(self, profile) -> str:
        version = ".".join(map(str, self.version(profile)))
        parts = [f"torch {version}", f"attention {self.attention}"
                 + (f" ({self.attention_kernel(profile)})" if self.attention == "sdpa" else ""),
                 f"loss {self.loss}", f"layer kernels {'fused' if self.fused_layers else self.layer_kernels}"]
        if self.kv_expanded(profile):
            parts.append("K/V expanded")
        parts.append(f"gradients reduced in {self.reduce_dtype}")
        parts.append("compiled" if self.compile else "eager")
        return ", ".join(parts)


def parse_version(text: str) -> tuple:
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?(?:[+.].*)?", text.strip())
    if not match:
        raise UsageError(f"{arg('torch', text)}: give torch's version as MAJOR.MINOR, e.g. {arg('torch', '2.1')}")
    version = (int(match.group(1)), int(match.group(2)))
    if version < (1, 8):
        raise UsageError(f"{arg('torch', text)}: the planner knows torch 1.8 and later")
    return version


def calibrated_version(profile) -> tuple:
    """The torch the profile's calibration was measured with; a profile without one plans
    today's torch as the version its attention rates describe (the newest)."""
    calibration = getattr(profile, "calibration", None)
    if calibration is not None:
        try:
            return parse_version(calibration.torch_version)
        except UsageError:
            pass
    return (2, 11)


def software_of(torch: Optional[str] = None, attention: Optional[str] = None, loss: Optional[str] = None,
                compile: bool = False, layer_kernels: Optional[str] = None, gqa: Optional[str] = None,
                reduce_dtype: Optional[str] = None) -> Software:
    """The software the flags name, each checked; what is not named is scaletrain's own."""
    for name, value, choices in (("attention", attention, ATTENTION), ("loss", loss, LOSS),
                                 ("layer_kernels", layer_kernels, LAYER_KERNELS), ("gqa", gqa, GQA),
                                 ("reduce_dtype", reduce_dtype, REDUCE_DTYPES)):
        if value is not None and value not in choices:
            raise UsageError(f"{arg(name, value)}: give one of {', '.join(choices)}")
    if torch:
        parse_version(torch)
    default = Software()
    return Software(torch=torch or "", attention=attention or default.attention, loss=loss or default.loss,
                    compile=compile, layer_kernels=layer_kernels or default.layer_kernels, gqa=gqa or "",
                    reduce_dtype=reduce_dtype or default.reduce_dtype)
