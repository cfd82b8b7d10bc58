"""Hardware profiles: what one kind of GPU can do, as data (one TOML file per kind, its sources
cited in it), and what a calibration measured on a real one.

`load_profile("h100-sxm-80g")` or `load_profile("my-gpu.toml")` reads one; `for_device_name(
torch.cuda.get_device_name())` finds the profile whose `cuda_names` list holds that exact
name, and refuses to guess: an unknown name gets no peak, with the reason. `scaletrain plan
--hardware` and the runs' MFU both read them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..foundation.errors import UsageError
from .calibration import Calibration
from .kernels import CAUSAL_FRACTION, head_dim_factor, published_rates

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).parent
PROFILES = HERE / "profiles"
CALIBRATIONS = HERE / "calibrations"

#: dtype names the profiles' peak tables use, and what a plan's precision reads.
DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32")


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    cuda_names: tuple
    memory_bytes: float
    hbm_bytes_per_s: float
    gpus_per_node: int
    peak_flops: dict  # dtype -> FLOP/s, dense
    efficiency: dict  # the roofline figures: matmul, matmul_fp8, attention, memory, kernel_overhead_us
    links: dict
    source: str  # the file it was read from
    calibration: Optional[Calibration] = None
    compute_scale: float = 1.0  # the calibration's compute figures × this (another clock, another part)
    memory_scale: float = 1.0  # the calibration's bandwidths × this (another memory)
    notes: tuple = field(default=())
    architecture: str = ""  # sm80, sm90: which published kernel rates describe it ("": none)

    def peak(self, dtype: str) -> Optional[float]:
        """Dense peak FLOP/s for `dtype` (bf16, fp16, fp8, tf32, fp32); None where the GPU has
        no such unit (an A100's fp8)."""
        return self.peak_flops.get(dtype)

    @property
    def basis(self) -> str:
        """What the compute figures rest on, in words."""
        if self.calibration is None:
            return "roofline figures (no calibration of this GPU)"
        scaled = " scaled to this part" if (self.compute_scale, self.memory_scale) != (1.0, 1.0) else ""
        c = self.calibration
        cuda = f", CUDA {c.cuda_version}" if c.cuda_version else ""
        return f"calibration measured on {c.gpu_name} (torch {c.torch_version}{cuda}){scaled}"

    # -- time of one kernel ------------------------------------------------------------------
    def matmul_seconds(self, m: int, n: int, k: int, dtype: str = "bf16", batch: int = 1) -> float:
        flops = 2.0 * m * n * k * batch
        if self.calibration is not None and self.calibration.has_matmul(dtype):
            rate = self.calibration.matmul_rate(m, n, k, dtype, batch) * self.compute_scale
            return flops / rate
        share = self.efficiency.get("matmul_fp8" if dtype == "fp8" else "matmul", 0.75)
        peak = self.peak(dtype) or self.peak("bf16")
        element = 1 if dtype == "fp8" else 2
        moved = element * batch * (m * k + k * n) + 2 * batch * m * n
        return max(flops / (peak * share), moved / self.memory_rate()) + self.kernel_overhead()

    def attention_seconds(self, counted_flops: float, seq_q: int, seq_k: int, causal: bool, backward: bool,
                          head_dim: int = 128, kernel: str = "calibrated") -> float:
        """An attention kernel's time for `counted_flops` as torch's FLOP counter counts them
        (the whole score matrix, causal or not): `calibrated`, the kernel the calibration timed
        (torch's scaled_dot_product_attention as it ran there); a kernel named (flash1, flash2,
        flash3, cudnn, triton, efficient) at the rate its authors published for this
        architecture; the roofline figure where neither exists. A causal kernel computes
        CAUSAL_FRACTION of the score matrix."""
        if kernel == "calibrated" and self.calibration is not None and self.calibration.attention:
            rate = self.calibration.attention_rate(seq_k, causal, backward, head_dim) * self.compute_scale
            measured_dim = self.calibration.attention_head_dim(head_dim)
            if self.architecture and measured_dim != head_dim:
                rate *= head_dim_factor(self.architecture, causal, head_dim, seq_k) / \
                    head_dim_factor(self.architecture, causal, measured_dim, seq_k)
            return counted_flops / rate
        square_causal = causal and seq_q == seq_k
        work = counted_flops * (CAUSAL_FRACTION if square_causal else 1.0)
        if kernel == "calibrated":
            kernel = "flash2"  # no calibration: the kernel torch's SDPA runs by default
        rates = published_rates(self.architecture, kernel, square_causal, head_dim, seq_k) if self.architecture else None
        if rates is None:
            return work / (self.peak("bf16") * self.efficiency.get("attention", 0.45)) + self.kernel_overhead()
        return work / (rates[1 if backward else 0] * 1e12 * self.compute_scale) + self.kernel_overhead()

    @property
    def in_step(self) -> float:
        """How fast kernels run inside a training step against alone (fresh inputs from memory
        rather than caches, sustained power): measured by the calibration's whole layers, else
        the profile's figure."""
        if self.calibration is not None and self.calibration.layer_efficiency != 1.0:
            # at most 1: a kernel is not faster in a step than alone with its caches warm; a
            # measurement above it says the prediction's memory-bound bytes were too many
            return min(1.0, self.calibration.layer_efficiency)
        return float(self.efficiency.get("in_step", 1.0))

    @property
    def multi_gpu(self) -> float:
        """How fast a GPU's kernels run in a synchronous job of many against alone: every step
        waits for the slowest GPU, NCCL's kernels share the SMs and memory while they overlap
        compute, and the in-step losses of one GPU are in it too. A figure of the profile (no
        multi-GPU measurement exists in this project)."""
        return float(self.efficiency.get("multi_gpu", 1.0))

    def memory_rate(self) -> float:
        """Bytes per second an elementwise kernel moves (read + written)."""
        if self.calibration is not None and self.calibration.memory_bytes_per_s:
            return self.calibration.memory_bytes_per_s * self.memory_scale
        return self.hbm_bytes_per_s * self.efficiency.get("memory", 0.8)

    def kernel_overhead(self) -> float:
        if self.calibration is not None and self.calibration.kernel_overhead_s:
            return self.calibration.kernel_overhead_s
        return self.efficiency.get("kernel_overhead_us", 4.0) * 1e-6

    def memory_seconds(self, moved_bytes: float, kernels: int = 1) -> float:
        return moved_bytes / self.memory_rate() + kernels * self.kernel_overhead()


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILES.glob("*.toml"))


def load_profile(name_or_file: str) -> HardwareProfile:
    """A built-in profile by name, or a user's TOML file (the built-ins' format)."""
    path = Path(name_or_file)
    if not (path.suffix == ".toml" and path.exists()):
        path = PROFILES / f"{name_or_file}.toml"
    if not path.exists():
        raise UsageError(f"unknown hardware {name_or_file!r}: give one of {', '.join(profile_names())} or a "
                         f"profile file (.toml, as scaletrain/hardware/profiles/*.toml) to --hardware")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--hardware {name_or_file}: cannot read it as TOML ({exc})") from None
    return profile_from_dict(data, path)


def profile_from_dict(data: dict, path: Path) -> HardwareProfile:
    where = f"--hardware {path}"
    try:
        peak = {k: float(v) * 1e12 for k, v in data["peak_tflops"].items() if k in DTYPES}
        efficiency = dict(data.get("efficiency", {}))
        profile = dict(
            name=str(data.get("name", path.stem)), description=str(data.get("description", "")),
            cuda_names=tuple(data.get("cuda_names", ())), memory_bytes=float(data["memory_gib"]) * 2 ** 30,
            hbm_bytes_per_s=float(data["hbm_tb_per_s"]) * 1e12, gpus_per_node=int(data.get("gpus_per_node", 8)),
            peak_flops=peak, efficiency=efficiency, links=dict(data.get("links", {})), source=str(path),
            architecture=str(data.get("architecture", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: the profile lacks or mistypes {exc}; see scaletrain/hardware/profiles/ for the "
                         "fields") from None
    if "bf16" not in peak or not all(math.isfinite(v) and v > 0 for v in peak.values()):
        raise UsageError(f"{where}: [peak_tflops] needs a positive bf16 figure")
    calibration = None
    name = efficiency.get("calibration")
    if name:
        file = Path(name) if Path(name).is_absolute() else (path.parent / name)
        if not file.exists():
            file = CALIBRATIONS / Path(name).name
        if file.exists():
            calibration = Calibration.from_dict(json.loads(file.read_text()), str(file))
    return HardwareProfile(**profile, calibration=calibration,
                           compute_scale=float(efficiency.get("calibration_compute_scale", 1.0)),
                           memory_scale=float(efficiency.get("calibration_memory_scale", 1.0)))


def for_device_name(device_name: str) -> tuple[Optional[HardwareProfile], str]:
    """The built-in profile whose `cuda_names` holds exactly this name, and why not where none
    does: (profile, "") or (None, reason). No nearest match: a wrong peak prints a wrong MFU."""
    for name in profile_names():
        profile = load_profile(name)
        if device_name in profile.cuda_names:
            return profile, ""
    return None, (f"no hardware profile names the GPU {device_name!r} (known: "
                  f"{', '.join(n for p in profile_names() for n in load_profile(p).cuda_names)}); its peak is not "
                  "guessed — add its name to a profile's cuda_names")


def profile_here(name_or_file: Optional[str], dry_run: bool) -> HardwareProfile:
    """The profile of the GPU this process runs on: the one named, else (a CPU dry run) the
    h200's, else the built-in profile naming this GPU exactly (UsageError with the reason
    where none does)."""
    if name_or_file:
        return load_profile(name_or_file)
    if dry_run:
        return load_profile("h200")
    import torch

    profile, reason = for_device_name(torch.cuda.get_device_name())
    if profile is None:
        raise UsageError(f"{reason}; or give --hardware NAME, the built-in profile of this GPU's kind")
    return profile
