"""What changes the meaning of a checkpoint, recorded when it is written and compared when
it is resumed: a different number of accumulation micro-steps or batch size per process
would silently change the batch each optimizer step sees, so they are refused in one line;
another world size or strategy is allowed (the state re-shards and the data position
carries over as a share of the epoch) and said in a note."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from ..errors import arg
from .layout import META_FILE

#: Facts that must match to continue a run, and the setting that fixes each.
MUST_MATCH = (("grad_accum", "grad_accum"), ("batch_size", "batch_size"))
#: Facts that may differ, with how a difference is said.
MAY_DIFFER = (("world_size", "saved by {saved} process(es), now {now}"),
              ("strategy", "saved under strategy {saved}, now {now}"))


def compare(saved: dict, now: dict, where: str) -> tuple[Optional[str], list[str]]:
    """(the refusal, or None; notes). A fact missing on either side is not compared."""
    for fact, setting in MUST_MATCH:
        a, b = saved.get(fact), now.get(fact)
        if a is not None and b is not None and a != b:
            return (f"{where} was written with {arg(setting, a)} but this run has {arg(setting, b)}: resuming would "
                    f"change the batch of every later optimizer step; give {arg(setting, a)} to continue it"), []
    notes = []
    for fact, text in MAY_DIFFER:
        a, b = saved.get(fact), now.get(fact)
        if a is not None and b is not None and a != b:
            notes.append(text.format(saved=a, now=b))
    return None, notes


def read_facts(folder: Path) -> dict:
    """The facts a checkpoint recorded (its meta.json), {} when unreadable."""
    try:
        meta = json.loads((Path(folder) / META_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return meta.get("facts", {}) if isinstance(meta, dict) else {}
