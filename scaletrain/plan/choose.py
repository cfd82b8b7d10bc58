"""Choosing a configuration for the user: every candidate of a world size — strategies and
their compositions × degrees × micro-batches × activation checkpointing, as the parallelisms'
cost modules propose them — predicted from one short measurement (a plan's probe, cached per
model, batch, world and machine by measurements.py, so a second choice is made at once), those
that do not fit the memory left out, the fastest chosen.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Optional

from ..foundation.defaults import WORTH_AT_SPEEDUP
from .constraints import Constraints
from .costs import every
from .machine import Machine
from .predict import Prediction, predict
from .probe import Probe
from .verdict import implausible

#: Room kept below the memory budget: a process's measured peak moves about this much from
#: the prediction. On a CPU without --steady-memory glibc's heap moves resident memory 10–20%
#: between runs of one command (docs/memory.md); with it (and on CUDA, whose allocator counts
#: what is held) the peaks measured were within 6.4% of the prediction outside pipelines, most
#: within 3%. A candidate predicted inside the room is taken only when none has it, and the
#: choice says so.
MEMORY_ROOM = 0.10
MEMORY_ROOM_STEADY = 0.05


def memory_room(device_type: str) -> float:
    """The room kept below a budget for processes of this kind (this process's environment
    says whether they keep their memory steady: --steady-memory sets it for all of them)."""
    from ..memory.steady import wanted

    return MEMORY_ROOM_STEADY if device_type == "cuda" or wanted(None) else MEMORY_ROOM


def fit_odds(predicted_bytes: float, budget_bytes: float, room: float) -> float:
    """The chance that a peak predicted at `predicted_bytes` measures within the budget, taking
    the prediction's error as normal with the room as two standard deviations (1 where it
    leaves the room, or where there is no budget)."""
    if predicted_bytes <= budget_bytes * (1 - room) or math.isinf(budget_bytes):
        return 1.0
    sigma = room / 2 * predicted_bytes
    return 0.5 * (1 + math.erf((budget_bytes - predicted_bytes) / (sigma * math.sqrt(2))))


def world_sizes_up_to(world_size: int, across_hosts: bool = False) -> list[int]:
    """The world sizes a choice for `world_size` processes considers: every one up to it, one
    process first (distributing may not pay); across hosts, one process or all of them."""
    return sorted({1, world_size}) if across_hosts else list(range(1, world_size + 1))


def candidates(world_size: int, batch_size: int, blocks: int, tensor_parallel: bool,
               sequence: int = 0) -> list[tuple[str, dict]]:
    """(strategy, options) for every configuration worth predicting on `world_size` processes:
    those each parallelism's cost module brings (`candidates`), the data-parallel ones first,
    each in every variant a module adds (`variants`: activation checkpointing's modes).
    `sequence`: the tokens of a sequence the model's attention attends over (0: none)."""
    costs = list(reversed(every()))
    found = [c for m in costs if m.candidates is not None
             for c in m.candidates(world_size, batch_size, blocks, tensor_parallel, sequence)]
    for m in costs:
        if m.variants is not None:
            found = [(name, {**options, **extra}) for name, options in found for extra in m.variants()]
    return found


@dataclass
class Choice:
    chosen: Optional[Prediction]
    runner_up: Optional[Prediction]
    rejected_for_memory: list = field(default_factory=list)
    considered: int = 0
    candidates: list = field(default_factory=list)
    """Every prediction made (fitting or not), fastest first: what an exhaustive search would measure."""
    speedup_interval: Optional[tuple] = None
    tight: bool = False
    """The chosen configuration's predicted peak is within MEMORY_ROOM of the budget: none
    that fits had that room."""
    budget_bytes: float = 0.0
    room: float = MEMORY_ROOM
    odds: float = 1.0
    """Tight: the chance that the chosen configuration's peak fits (fit_odds)."""
    distributed: Optional[Prediction] = None
    """The fastest of several processes that fits (what one process was chosen over)."""

    def flags(self) -> list[str]:
        """The chosen configuration as `scaletrain train` flags."""
        from ..strategies.flags import option_flags

        if self.chosen is None:
            return []
        return ["--strategy", self.chosen.strategy, *option_flags(self.chosen.options)]

    def label(self, p: Optional[Prediction] = None) -> str:
        p = p or self.chosen
        if p is None:
            return "nothing"
        extras = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in p.options.items())
        return f"{p.strategy} ×{p.world_size}" + (f" ({extras})" if extras else "")

    def lines(self) -> list[str]:
        """Two lines: what was chosen and why; what came next and what did not fit."""
        if self.chosen is None:
            return [f"No configuration of the {self.considered} considered fits the memory: "
                    + "; ".join(self.rejected_for_memory[:3])]
        c = self.chosen
        interval = (f" (95% interval {self.speedup_interval[0]:.2f}–{self.speedup_interval[1]:.2f}×)"
                    if self.speedup_interval else "")
        first = (f"Chosen: {self.label()}: {c.speedup:.2f}× one process predicted{interval}, "
                 f"{c.samples_per_s:,.0f} samples/s, {c.memory_bytes / 1e6:,.0f} MB per process; the fastest of "
                 f"{self.considered} configurations predicted.")
        if self.tight:
            first += (f" Tight: {c.memory_bytes / 1e6:,.0f} MB predicted against {self.budget_bytes / 1e6:,.0f} MB, "
                      f"inside the {self.room:.0%} the prediction can miss by; none that fits leaves that room, and "
                      f"of those that fit this one has the most speed to expect, its peak fitting about "
                      f"{self.odds:.0%} of the time (watch peak_memory_bytes, or give more processes).")
        if c.world_size == 1 and self.distributed is not None:
            d = self.distributed
            first += (f" One process: distributing is predicted to lose here — the fastest of several processes, "
                      f"{self.label(d)}, {d.samples_per_s / c.samples_per_s:.2f}× its samples/s.")
        if c.world_size > 1 and c.speedup < 1:  # (chosen only where what was given fixes the world size)
            first += (f" Slower than one process: one process (--nproc-per-node 1) is predicted "
                      f"{1 / c.speedup:.1f}× as fast.")
        elif c.world_size > 1 and c.speedup < WORTH_AT_SPEEDUP:
            first += (f" Below the {WORTH_AT_SPEEDUP:g}× that pays: one process (--nproc-per-node 1) would do about as "
                      f"well.")
        second = (f"Runner-up: {self.label(self.runner_up)}, {self.runner_up.speedup:.2f}×"
                  if self.runner_up else "Runner-up: none")
        if self.rejected_for_memory:
            second += (f"; left out for memory: {len(self.rejected_for_memory)} "
                       f"({', '.join(self.rejected_for_memory[:3])}{' …' if len(self.rejected_for_memory) > 3 else ''})")
        return [first, second + "."]


def choose(probes: list[Probe], world_size: int, batch_size: int, machine: Machine,
           constraints: Optional[Constraints] = None, across_hosts: bool = False) -> Choice:
    """The fastest configuration that fits, by the median prediction over the probes' rounds,
    among those of every world size up to `world_size` (world_sizes_up_to); where the user fixed
    something (`constraints`), among those of `world_size` that keep it."""
    probe = probes[0]
    fp = probe.footprint
    tensor_parallel = bool(fp.block_tp_param_bytes)

    def of(n: int) -> list:
        return candidates(n, batch_size, len(fp.block_param_bytes), tensor_parallel, fp.attention_sequence)

    if constraints:
        found = [(world_size, name, options) for name, options in constraints.candidates(of(world_size), world_size)]
    else:
        found = [(n, name, options) for n in world_sizes_up_to(world_size, across_hosts) for name, options in of(n)]
    predicted: list[tuple[Prediction, list[float]]] = []
    rejected, every = [], []
    for n, name, chosen_options in found:
        rounds = [p for p in (predict(pr, name, n, machine, chosen_options) for pr in probes) if p]
        if not rounds:
            continue
        middle = sorted(rounds, key=lambda p: p.samples_per_s)[len(rounds) // 2]
        if implausible(middle, probe):
            continue  # a disturbed measurement's figure, not a candidate's
        every.append(middle)
        if not middle.fits:
            label = " ".join(filter(None, [f"{name} ×{n}", _short(chosen_options)]))
            rejected.append(f"{label} needs {middle.memory_bytes / 1e6:,.0f} MB")
            continue
        predicted.append((middle, [p.speedup for p in rounds]))
    # The fastest first among those that leave the prediction's room below the budget. Those
    # inside the room only when no candidate has it, and then by the speed to expect: a
    # candidate predicted at the budget's edge fits about half the time, so a slower one
    # further below it can be the better bet (fit_odds).
    budget = machine.device_memory_bytes
    room = memory_room(probe.device_type)
    roomy = lambda p: p.memory_bytes <= budget * (1 - room)  # noqa: E731
    predicted.sort(key=lambda item: (roomy(item[0]), item[0].samples_per_s * fit_odds(item[0].memory_bytes, budget,
                                                                                       room)), reverse=True)
    choice = Choice(predicted[0][0] if predicted else None, predicted[1][0] if len(predicted) > 1 else None,
                    rejected, len(found), sorted(every, key=lambda p: p.samples_per_s, reverse=True),
                    tight=bool(predicted) and not roomy(predicted[0][0]), budget_bytes=budget, room=room)
    if choice.tight:
        choice.odds = fit_odds(choice.chosen.memory_bytes, budget, room)
    choice.distributed = next((p for p, _ in predicted if p.world_size > 1), None)
    if predicted and len(predicted[0][1]) >= 2:
        speedups = predicted[0][1]
        choice.speedup_interval = (min(speedups), max(speedups)) if len(speedups) < 3 else \
            (statistics.quantiles(speedups, n=40)[0], statistics.quantiles(speedups, n=40)[-1])
    return choice


def _short(options: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())
