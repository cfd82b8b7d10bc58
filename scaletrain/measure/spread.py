"""How sure a measured figure is: medians with 95% confidence intervals over rounds.

A bench measures every configuration once per round, in alternating order, each time in
fresh processes. Round-to-round differences (the machine's other load, where the operating
system put the processes, the memory a process happened to get) are the noise; a figure is
the median over the rounds and its spread is a 95% confidence interval:

- for quantities that are ratios or rates (samples/s, speedup, time per step) the interval
  is Student's t interval of the mean of their logarithms, turned back into a ratio: the
  interval of the geometric mean. Ratios multiply, so their noise is symmetric on a log
  scale, and the interval stays positive;
- for times that can be zero (exposed communication, idle time) the plain t interval of
  the mean, cut at zero.

Speedups are taken per round (this round's samples/s ÷ this round's baseline), so that load
that slows a whole round cancels: the interval of these paired ratios is much narrower than
the two configurations' own intervals would suggest.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

#: The confidence level of every interval scaletrain prints.
LEVEL = 0.95


def _t_density(x: float, df: float) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf_above_zero(x: float, df: float, pieces: int = 2000) -> float:
    """P(0 < T < x) by Simpson's rule (the density is smooth; 2000 pieces give 1e-9)."""
    h = x / pieces
    total = _t_density(0.0, df) + _t_density(x, df)
    for i in range(1, pieces):
        total += (4 if i % 2 else 2) * _t_density(i * h, df)
    return total * h / 3


@functools.lru_cache(maxsize=None)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p > 0.5) of Student's t distribution with df degrees of freedom."""
    if not 0.5 < p < 1 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    target = p - 0.5
    low, high = 0.0, 1.0
    while _t_cdf_above_zero(high, df) < target:
        high *= 2
    for _ in range(60):  # bisection to far below the figures' precision
        middle = (low + high) / 2
        if _t_cdf_above_zero(middle, df) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclass(frozen=True)
class Spread:
    """A figure over rounds: its median, a 95% interval (None with fewer than two rounds),
    and the per-round values it comes from."""
    median: float
    low: Optional[float]
    high: Optional[float]
    rounds: int
    values: tuple

    def as_dict(self) -> dict:
        return {**asdict(self), "values": list(self.values)}

    @property
    def known(self) -> bool:
        return self.low is not None

    def scaled(self, factor: float) -> "Spread":
        """The same figure multiplied by a constant (efficiency = speedup ÷ processes)."""
        mul = (lambda v: None if v is None else v * factor)
        return Spread(self.median * factor, mul(self.low), mul(self.high), self.rounds,
                      tuple(v * factor for v in self.values))


def _t_half_width(values: Sequence[float]) -> float:
    n = len(values)
    return t_quantile(0.5 + LEVEL / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)


def ratio_spread(values: Sequence[float]) -> Optional[Spread]:
    """Median and the geometric mean's 95% interval of positive values (rates, ratios, times)."""
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    if any(v <= 0 for v in values):
        return plain_spread(values)
    low = high = None
    if len(values) >= 2:
        logs = [math.log(v) for v in values]
        centre, half = statistics.fmean(logs), _t_half_width(logs)
        low, high = math.exp(centre - half), math.exp(centre + half)
    return Spread(statistics.median(values), low, high, len(values), tuple(values))


def plain_spread(values: Sequence[float]) -> Optional[Spread]:
    """Median and the mean's 95% interval, cut at zero (times that may be zero)."""
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    low = high = None
    if len(values) >= 2:
        centre, half = statistics.fmean(values), _t_half_width(values)
        low, high = max(0.0, centre - half), centre + half
    return Spread(statistics.median(values), low, high, len(values), tuple(values))


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round by round: numerator ÷ denominator (both measured in the same round)."""
    return [a / b for a, b in zip(numerators, denominators) if a is not None and b]
