"""A profile of the user's own GPU: a built-in profile's datasheet figures and links with the
calibration just measured on the GPU (`scaletrain calibrate`), written as a profile file that
`scaletrain plan --hardware FILE` reads; and how that calibration compares with the built-in
profile's figures for the same kernels."""

from __future__ import annotations

import json
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from . import HardwareProfile, load_profile
from .calibration import Calibration

#: The calibration's figures taken as they were measured on this very part.
MEASURED_HERE = ("calibration_compute_scale", "calibration_memory_scale")


def write_profile(base: HardwareProfile, calibration: dict, out: Path) -> Path:
    """Writes `out` (a .toml) and its calibration beside it (`out` with .json); returns the
    profile file."""
    data = tomllib.loads(Path(base.source).read_text())
    data["name"] = out.stem
    data["description"] = f"{base.description}; calibrated on {calibration['gpu_name']} " \
                          f"(torch {calibration['torch_version']}, {calibration['measured_at']})"
    efficiency = {k: v for k, v in data.get("efficiency", {}).items() if k not in MEASURED_HERE}
    efficiency["calibration"] = out.with_suffix(".json").name
    data["efficiency"] = efficiency
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(calibration, indent=1) + "\n")
    out.write_text(f"# Written by `scaletrain calibrate` from the built-in profile {base.name}: its datasheet\n"
                   "# figures and links, with the calibration measured on this GPU (the .json beside it).\n"
                   + _toml(data))
    return out


def _toml(data: dict) -> str:
    lines, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_value(value)}")
    for name, table in tables:
        lines += ["", f"[{name}]"] + [f"{key} = {_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string


def comparison(measured_file: Path, base: HardwareProfile) -> list[tuple[str, float, float]]:
    """(what, this GPU's figure, the built-in profile's) for the kernels the calibration timed:
    bf16 products (the median shape's TFLOP/s), attention (causal, head size 128, the longest
    sequence measured, forward and backward TFLOP/s as torch counts), memory-bound kernels
    (GB/s) and a kernel's launch (µs)."""
    mine = load_profile(str(measured_file))
    calibration: Calibration = mine.calibration
    rows = sorted(calibration.matmul.get("bf16", []), key=lambda r: r[3])
    out = []
    if rows:
        m, n, k, rate = rows[len(rows) // 2]
        theirs = 2.0 * m * n * k / base.matmul_seconds(m, n, k) / 1e12
        out.append((f"bf16 product {m}×{n}×{k}, TFLOP/s", rate / 1e12, theirs))
    causal = [r for r in calibration.attention if r[1] and r[4] == calibration.attention_head_dim(128)]
    if causal:
        seq, _causal, forward, backward, head_dim = max(causal, key=lambda r: r[0])
        for name, rate, is_backward in (("forward", forward, False), ("backward", backward, True)):
            flops = 1e12
            theirs = flops / base.attention_seconds(flops, seq, seq, True, is_backward, head_dim) / 1e12
            out.append((f"attention {name}, causal, seq {seq}, TFLOP/s (torch's count)", rate / 1e12, theirs))
    out.append(("memory-bound kernels, GB/s", mine.memory_rate() / 1e9, base.memory_rate() / 1e9))
    out.append(("a kernel's launch, µs", mine.kernel_overhead() * 1e6, base.kernel_overhead() * 1e6))
    return out
