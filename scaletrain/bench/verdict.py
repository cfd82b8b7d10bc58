"""The one sentence a bench ends with: worth it, not worth it, or cannot tell at this noise level.

The question is whether running on several processes is worth it compared with one process
measured the same way. A distributed configuration *pays* when its speedup over one process
is at least `worth_at` (default 1.2×, defaults.WORTH_AT_SPEEDUP says why). The verdict rests on the 95% interval of the speedup,
not on its median alone:

- worth it: some distributed configuration's whole interval lies at or above `worth_at`;
- not worth it: every distributed configuration's whole interval lies below `worth_at`;
- cannot tell: otherwise (an interval straddles `worth_at`, or fewer than two rounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..measure.spread import Spread

WORTH_IT, NOT_WORTH_IT, CANNOT_TELL = "worth it", "not worth it", "cannot tell"


@dataclass(frozen=True)
class Verdict:
    kind: Optional[str]
    """WORTH_IT, NOT_WORTH_IT, CANNOT_TELL, or None when nothing distributed was measured."""
    sentence: str
    best: Optional[str] = None
    """The label of the configuration the sentence is about."""

    @property
    def decided(self) -> bool:
        return self.kind in (WORTH_IT, NOT_WORTH_IT)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "decided": self.decided, "sentence": self.sentence, "best": self.best}


def _interval_text(s: Spread) -> str:
    if not s.known:
        return f"no interval from {s.rounds} round(s)"
    return f"95% interval {s.low:.2f}–{s.high:.2f}× over {s.rounds} paired rounds"


def side(s: Spread, worth_at: float) -> Optional[bool]:
    """True: the interval lies at or above worth_at; False: below it; None: undecided."""
    if not s.known:
        return None
    if s.low >= worth_at:
        return True
    if s.high < worth_at:
        return False
    return None


def decide(rows: list[dict], reference: Optional[dict], worth_at: float, budget_note: str = "") -> Verdict:
    """`rows`: the bench's rows, each with a "speedup" Spread against `reference` (the
    fastest one-process configuration). `budget_note`: why measuring stopped, for the
    cannot-tell sentence."""
    distributed = [r for r in rows if r["world_size"] > 1 and r.get("speedup") is not None]
    if not distributed or reference is None:
        return Verdict(None, "No verdict: no configuration on more than one process was measured "
                             "(give --world-sizes 1,2 or more).")
    base = (f"one process ({reference['label']}, the fastest one-process configuration: "
            f"{reference['samples_per_s'].median:,.0f} samples/s)")
    best = max(distributed, key=lambda r: r["speedup"].median)
    above = [r for r in distributed if side(r["speedup"], worth_at) is True]
    if above:
        win = max(above, key=lambda r: r["speedup"].low)
        s = win["speedup"]
        return Verdict(WORTH_IT, f"Verdict: worth it. {win['label']} runs at {s.median:.2f}× the samples/s of {base}; "
                                 f"{_interval_text(s)}, wholly at or above the {worth_at:g}× from which distributing "
                                 f"pays; efficiency {win['efficiency'].median:.0%}.", win["label"])
    if all(side(r["speedup"], worth_at) is False for r in distributed):
        s = best["speedup"]
        slower = "slower than one process" if s.high < 1 else f"short of the {worth_at:g}× that pays"
        return Verdict(NOT_WORTH_IT, f"Verdict: not worth it. The best distributed configuration, {best['label']}, "
                                     f"runs at {s.median:.2f}× the samples/s of {base}; {_interval_text(s)}, wholly "
                                     f"below {worth_at:g}×: {slower}.", best["label"])
    open_rows = [r for r in distributed if side(r["speedup"], worth_at) is None]
    row = max(open_rows, key=lambda r: r["speedup"].median)
    s = row["speedup"]
    why = (f"its {_interval_text(s)} does not lie wholly above or below {worth_at:g}×" if s.known
           else f"{s.rounds} round gives no interval")
    return Verdict(CANNOT_TELL, f"Verdict: cannot tell at this noise level. {row['label']} runs at {s.median:.2f}× "
                                f"the samples/s of {base}, but {why}{budget_note}.", row["label"])
