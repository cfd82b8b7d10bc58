"""`precision="float8"` (`--precision float8`): the linear layers' matrix products in float8,
with torchao's float8 training (tensorwise scaling), on GPUs that have float8 hardware
(compute capability 8.9 and later: L4, L40, H100, H200, B200). Everything else computes in
bf16 (autocast, or FSDP's mixed-precision policy), parameters and optimizer state stay fp32.

What makes it pay, as torchtitan does it:

- compiled: float8 scales and casts every input, weight and gradient of every layer (an
  absolute maximum, a scale, a cast: separate memory-bound kernels in eager mode, slower than
  the bf16 product they save). `torch.compile` fuses them, so float8 compiles the model's
  blocks (parallel/compile.py) whether or not `compile` was given; where torch.compile cannot
  run (no Triton for this GPU), float8 is refused in one line;
- only layers large enough to gain: torchao's own filter for the recipe (tensorwise: a layer
  with at most 4,096 inputs and 1,024 outputs stays bf16), and never the output head, whose
  float8 rounding costs accuracy for little speed; sizes must be multiples of 16;
- all-gathered in float8 (half of bf16's bytes) only where FSDP shards the parameters (more
  than one shard), and then the scales of every weight are computed at once after each
  optimizer step (one reduction for all, not one per layer in the next forward). With one
  shard there is nothing to gather.

Applied before tensor parallel, checkpointing, compilation and FSDP (as torchtitan applies
its model converters before parallelising). Refused in one line where it cannot run: on a
CPU, on a GPU without float8, without torchao, without torch.compile.
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from ..foundation.errors import UsageError, arg
from .config import FSDP, ParallelConfig
from .part import ModelPart

#: Linear layers left in bf16: the output head (torchtitan's "output", Hugging Face's "lm_head").
SKIPPED = ("output", "lm_head")
RECIPE = "tensorwise"
FLOAT8_HARDWARE = "compute capability 8.9 or later: L4, L40, H100, H200, B200"
PIP_LINE = "pip install torchao"


def compile_problem() -> Optional[str]:
    """Why torch.compile cannot compile for this GPU (its CUDA code needs Triton), or None."""
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return "this torch has no torch.compile for CUDA"
    return None if has_triton() else "Triton, which torch.compile needs for CUDA, is not installed"


def float8_problem(device_type: str, capability: Optional[tuple] = None, device_name: str = "",
                   compiles: Optional[str] = "check") -> Optional[str]:
    """Why float8 training cannot run on this device (one line), or None. `compiles`: why
    torch.compile cannot run here (None: it can; "check": find out)."""
    if device_type != "cuda":
        return (f"{arg('precision', 'float8')} trains the linear layers in float8 on GPUs with float8 hardware "
                f"({FLOAT8_HARDWARE}), but this run is on the {device_type}: use {arg('precision', 'bf16')}")
    if capability is None:
        import torch

        capability = torch.cuda.get_device_capability()
        device_name = torch.cuda.get_device_name()
    if tuple(capability) < (8, 9):
        return (f"{arg('precision', 'float8')} needs float8 hardware ({FLOAT8_HARDWARE}), but this GPU is "
                f"{device_name or 'older'} (compute capability {capability[0]}.{capability[1]}): use "
                f"{arg('precision', 'bf16')}")
    try:
        import torchao.float8  # noqa: F401
    except ImportError as exc:
        return (f"{arg('precision', 'float8')} uses torchao's float8 training, which cannot be imported here "
                f"({exc}): {PIP_LINE} (a release built for this torch), or use {arg('precision', 'bf16')}")
    why = compile_problem() if compiles == "check" else compiles
    if why:
        return (f"{arg('precision', 'float8')} runs compiled (eager float8 scales and casts in separate kernels and "
                f"is slower than bf16), but torch.compile cannot run here: {why}; install it, or use "
                f"{arg('precision', 'bf16')}")
    return None


def check_float8(device_type: str) -> None:
    problem = float8_problem(device_type)
    if problem:
        raise UsageError(problem)


def converts(module: nn.Module, fqn: str) -> bool:
    """Whether a layer computes in float8: a linear layer, not the output head, large enough to
    gain by torchao's filter for the recipe (sizes multiples of 16)."""
    if not isinstance(module, nn.Linear) or fqn.split(".")[-1] in SKIPPED:
        return False
    from torchao.float8 import _auto_filter_for_recipe

    return bool(_auto_filter_for_recipe(RECIPE, filter_fqns=[])(module, fqn))


def gathers_in_float8(config: ParallelConfig) -> bool:
    """FSDP all-gathers the weights in float8 (and their scales are computed after each
    optimizer step) only where it shards them: more than one shard."""
    return config.data_parallel == FSDP and config.dims.shards > 1


class Float8Training:
    name = "float8"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.option("precision") == "float8"

    def apply(self, part: ModelPart, config: ParallelConfig, topology) -> None:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        gathered = gathers_in_float8(config)
        before = sum(isinstance(m, nn.Linear) for m in part.module.modules())
        convert_to_float8_training(part.module, config=Float8LinearConfig(enable_fsdp_float8_all_gather=gathered),
                                   module_filter_fn=converts)
        converted = sum(type(m).__name__ == "Float8Linear" for m in part.module.modules())
        if gathered:
            part.after_optimizer_step.append(_precompute_scales(part.module))
        part.facts["float8_linear_layers"] = converted
        part.banner.append(f"float8: {converted} of {before} linear layers compute in float8 (torchao, {RECIPE} "
                           "scaling; the rest are too small to gain, or the output head), compiled"
                           + ("; FSDP all-gathers them in float8, their scales computed after each optimizer step"
                              if gathered else ""))


def _precompute_scales(module: nn.Module):
    def after_step(*_args, **_kwargs) -> None:
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(module)
    return after_step
