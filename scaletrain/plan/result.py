"""What the planner answers (`Plan`): the measurements it rests on, the predictions with their
intervals over the rounds, the expected error and whether it is small enough to tell, the
conclusions in plain words — or, asked to choose, the choice and every candidate predicted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .choose import Choice
from .machine import Machine
from .measurements import Measured
from .predict import Prediction
from .probe import Probe
from .report import WorkedOut
from .summary import key
from .verdict import implausible


def spread_pair(spread) -> Optional[list]:
    return [spread.low, spread.high] if spread is not None and spread.known else None


@dataclass
class Plan:
    machine: Machine
    measured: Measured
    """The rounds kept, those left out, why measuring stopped."""
    probes: list
    """The probes predicted from: the rounds kept (the disturbed ones where every round was)."""
    probe: Optional[Probe] = None
    """Every measured time the median over the rounds (for showing)."""
    predictions: list = field(default_factory=list)
    """One Prediction per configuration, each figure the median over the rounds."""
    spreads: dict = field(default_factory=dict)
    """key(prediction) -> Spread of its predicted speedup over the rounds."""
    by_round: list = field(default_factory=list)
    """Each round's own predictions."""
    expected_error: Optional[float] = None
    max_error: float = 0.0
    told: bool = False
    """Whether the expected error is within `max_error`: the plan names a best configuration."""
    conclusions: list = field(default_factory=list)
    choice: Optional[Choice] = None
    world_size: Optional[int] = None
    """The world size chosen for."""
    max_other_load: float = 0.0
    step_spreads: dict = field(default_factory=dict)
    """threads -> the spread of the measured step time over the rounds."""
    worked_out: Optional[WorkedOut] = None
    """What showing the plan needs worked out (report.py)."""

    def prediction_for(self, strategy: str, world_size: int, options: dict, round_index: int = 0) -> Optional[Prediction]:
        """A round's prediction of one configuration (None where it cannot run)."""
        return next((p for p in self.by_round[round_index] if (p.strategy, p.world_size, p.options) ==
                     (strategy, world_size, options)), None)

    def lines(self) -> list[str]:
        """A choice in words: what was chosen and why, what came next, what the memory means."""
        return [*self.choice.lines(), *self.conclusions] if self.choice is not None else self.conclusions

    def as_dict(self) -> dict:
        """What `plan --json` prints (and --out writes)."""
        if self.choice is not None:
            c = self.choice
            return {"world_size": self.world_size, "chosen": c.chosen.as_dict() if c.chosen else None,
                    "flags": c.flags(), "runner_up": c.runner_up.as_dict() if c.runner_up else None,
                    "rejected_for_memory": c.rejected_for_memory, "considered": c.considered,
                    "speedup_interval": c.speedup_interval, "tight": c.tight,
                    "fit_odds": c.odds if c.tight else None, "lines": c.lines(),
                    "candidates": [p.as_dict() for p in c.candidates]}
        return {"probe": self.probe.as_dict(), "probes": [p.as_dict() for p in self.probes],
                "machine": self.machine.__dict__,
                "predictions": [{**p.as_dict(), "speedup_interval": spread_pair(self.spreads.get(key(p))),
                                 "measurement_error": implausible(p, self.probe)} for p in self.predictions],
                "expected_error": self.expected_error, "max_error": self.max_error, "told": self.told,
                "rounds_left_out": self.measured.left_out, "stop_reason": self.measured.stop_reason,
                "max_other_load_cores": self.max_other_load, "conclusions": self.conclusions}
