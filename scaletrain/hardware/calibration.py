"""What `benchmarks/calibrate_gpu.py` measured on a real GPU, read back: matrix multiplies
over a transformer layer's shapes, flash attention over sequence lengths, and memory-bound
kernels; and the rates a prediction takes from them.

A shape that was not measured takes the rate of the measured shapes nearest to it (in the
logarithms of m, n and k, weighted by closeness); a product smaller than every measured one
is slowed by the launch overhead the calibration measured, as a small kernel is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Calibration:
    gpu_name: str
    torch_version: str
    source: str
    matmul: dict = field(default_factory=dict)  # dtype -> [(m, n, k, flop/s)]
    attention: tuple = ()  # (seq, causal, forward flop/s, backward flop/s, head_dim), counted as torch counts
    memory_bytes_per_s: float = 0.0
    kernel_overhead_s: float = 0.0
    layer_efficiency: float = 1.0  # whole layers' kernels' time alone ÷ the layers' measured time
    measured_at: str = ""
    cuda_version: str = ""
    attention_kernel: str = ""  # the kernels scaled_dot_product_attention ran ("": not recorded)
    # rates already interpolated, by shape: a plan asks for the same few shapes thousands of times
    _rates: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: dict, source: str) -> "Calibration":
        matmul: dict = {}
        for row in data.get("matmul", []):
            matmul.setdefault(row["dtype"], []).append((row["m"], row["n"], row["k"], row["tflops"] * 1e12))
        attention = tuple((row["seq"], bool(row["causal"]), row["forward_tflops"] * 1e12,
                           row["backward_tflops"] * 1e12, int(row.get("head_dim", 128)))
                          for row in data.get("attention", []))
        rows = data.get("memory", [])
        large = [row for row in rows if row.get("bytes", 0) >= 2 ** 26] or rows  # beyond the caches where measured
        memory = [row["gb_per_s"] * 1e9 for row in large]
        return cls(gpu_name=data.get("gpu_name", "?"), torch_version=data.get("torch_version", "?"), source=source,
                   matmul=matmul, attention=attention,
                   memory_bytes_per_s=sorted(memory)[len(memory) // 2] if memory else 0.0,
                   kernel_overhead_s=float(data.get("kernel_overhead_us", 0.0)) * 1e-6,
                   layer_efficiency=float(data.get("layer_efficiency", 1.0)),
                   measured_at=data.get("measured_at", ""), cuda_version=str(data.get("cuda_version") or ""),
                   attention_kernel=data.get("attention_kernel", ""))

    def has_matmul(self, dtype: str) -> bool:
        return bool(self.matmul.get(dtype))

    def matmul_rate(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float:
        """FLOP/s of an (m×k)·(k×n) product (`batch` of them), from the nearest measured shapes."""
        key = (m, n, k, dtype, batch)
        if key not in self._rates:
            self._rates[key] = self._matmul_rate(m, n, k, dtype, batch)
        return self._rates[key]

    def _matmul_rate(self, m: int, n: int, k: int, dtype: str, batch: int) -> float:
        rows = self.matmul[dtype]
        m = m * batch  # a batched product runs about as one of the stacked rows
        point = (math.log2(max(m, 1)), math.log2(max(n, 1)), math.log2(max(k, 1)))
        nearest = sorted(rows, key=lambda r: _distance(point, r))[:4]
        weights = [1.0 / (1e-3 + _distance(point, r)) for r in nearest]
        # Interpolate the time per FLOP (harmonic mean of rates), the quantity that adds up.
        rate = sum(weights) / sum(w / r[3] for w, r in zip(weights, nearest))
        flops = 2.0 * m * n * k
        smallest = min(rows, key=lambda r: r[0] * r[1] * r[2])
        if flops < 2.0 * smallest[0] * smallest[1] * smallest[2]:
            # Below every measured size the launch overhead dominates: time = overhead + work.
            return flops / (self.kernel_overhead_s + flops / rate)
        return rate

    def attention_head_dim(self, head_dim: int) -> int:
        """The measured head size nearest to `head_dim`."""
        return min({r[4] for r in self.attention}, key=lambda d: (abs(math.log2(d) - math.log2(head_dim)), -d))

    def attention_rate(self, seq: int, causal: bool, backward: bool, head_dim: int = 128) -> float:
        """Counted FLOP/s of the attention kernel at `seq`, at the measured head size nearest
        to `head_dim` (interpolated in log seq; the ends held)."""
        measured = self.attention_head_dim(head_dim)
        rows = [r for r in self.attention if r[4] == measured]
        rows = sorted((r for r in rows if r[1] == causal), key=lambda r: r[0]) or sorted(rows, key=lambda r: r[0])
        pick = 3 if backward else 2
        if seq <= rows[0][0]:
            return rows[0][pick]
        for low, high in zip(rows, rows[1:]):
            if seq <= high[0]:
                t = (math.log2(seq) - math.log2(low[0])) / (math.log2(high[0]) - math.log2(low[0]))
                return low[pick] + t * (high[pick] - low[pick])
        return rows[-1][pick]


def _distance(point: tuple, row: tuple) -> float:
    return math.sqrt(sum((a - math.log2(b)) ** 2 for a, b in zip(point, row[:3])))
