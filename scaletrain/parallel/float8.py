"""`precision="float8"` (`--precision float8`): the linear layers' matrix products in float8,
with torchao's float8 training, on GPUs that have float8 hardware (compute capability 8.9 and
later: L4, L40, H100, H200, B200). Everything else computes in bf16 (autocast, or FSDP's
mixed-precision policy), parameters and optimizer state stay fp32.

Applied before tensor parallel, checkpointing, compilation and FSDP (as torchtitan applies
its model converters before parallelising): each `nn.Linear` whose sizes are multiples of
16 becomes torchao's `Float8Linear` (tensorwise dynamic scaling), except the output head,
whose float8 rounding costs accuracy for little speed. Under FSDP the shards are all-gathered
in float8 (half of bf16's bytes), with the scales computed before the all-gather.

Refused in one line where it cannot run: on a CPU, on a GPU without float8, without torchao.
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from ..foundation.errors import UsageError, arg
from .config import FSDP, ParallelConfig
from .part import ModelPart

#: Linear layers left in bf16: the output head (torchtitan's "output", Hugging Face's "lm_head").
SKIPPED = ("output", "lm_head")
FLOAT8_HARDWARE = "compute capability 8.9 or later: L4, L40, H100, H200, B200"
PIP_LINE = "pip install torchao"


def float8_problem(device_type: str, capability: Optional[tuple] = None, device_name: str = "") -> Optional[str]:
    """Why float8 training cannot run on this device (one line), or None."""
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
    return None


def check_float8(device_type: str) -> None:
    problem = float8_problem(device_type)
    if problem:
        raise UsageError(problem)


def _converts(module: nn.Module, fqn: str) -> bool:
    if not isinstance(module, nn.Linear):
        return False
    if fqn.split(".")[-1] in SKIPPED:
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


class Float8Training:
    name = "float8"

    def enabled(self, config: ParallelConfig) -> bool:
        return config.option("precision") == "float8"

    def apply(self, part: ModelPart, config: ParallelConfig, topology) -> None:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        fsdp = config.data_parallel == FSDP
        settings = Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp)
        before = sum(isinstance(m, nn.Linear) for m in part.module.modules())
        convert_to_float8_training(part.module, config=settings, module_filter_fn=_converts)
        converted = sum(type(m).__name__ == "Float8Linear" for m in part.module.modules())
        part.facts["float8_linear_layers"] = converted
        part.banner.append(f"float8: {converted} of {before} linear layers compute in float8 (torchao, tensorwise "
                           f"scaling){'; FSDP all-gathers them in float8' if fsdp else ''}; the rest in bf16")
