"""What changes the meaning of a checkpoint, recorded when it is written and compared when
it is resumed: a different number of accumulation micro-steps, or a batch size per process
that keeps neither the batch per process nor the global batch (× the data-parallel size),
would silently change the batch each optimizer step sees, so they are refused in one line;
another world size or strategy is allowed (the state re-shards and the data position
carries over as a share of the epoch) and said in a note. A layout with fewer data-parallel
processes (tensor parallel alone, pipeline × tensor parallel) continues a run exactly with
the batch per process that keeps its global batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from ..foundation.errors import arg
from .layout import META_FILE

#: Facts that must match to continue a run, and the setting that fixes each: the sequence
#: length first, as a language model's batch per process follows from it (tokens per batch).
MUST_MATCH = (("seq_len", "seq_len"), ("grad_accum", "grad_accum"), ("batch_size", "batch_size"))
#: Facts that may differ, with how a difference is said.
MAY_DIFFER = (("world_size", "saved by {saved} process(es), now {now}"),
              ("strategy", "saved under strategy {saved}, now {now}"))


def compare(saved: dict, now: dict, where: str) -> tuple[Optional[str], list[str]]:
    """(the refusal, or None; notes). A fact missing on either side is not compared."""
    for fact, setting in MUST_MATCH:
        a, b = saved.get(fact), now.get(fact)
        if a is not None and b is not None and a != b and not (fact == "batch_size" and same_global_batch(saved, now)):
            if fact == "seq_len":
                return (f"{where} was written with {arg(setting, a)} but this run has {arg(setting, b)}: resuming "
                        f"would change every sequence the model sees; give {arg(setting, a)} to continue it"), []
            keeps = global_batch_size(saved, now) if fact == "batch_size" else None
            other = (f" (the same per process) or {arg(setting, keeps)} (the same global batch)"
                     if keeps and keeps != a else " (the same per process and global batch)" if keeps else "")
            return (f"{where} was written with {arg(setting, a)} but this run has {arg(setting, b)}: resuming would "
                    f"change the batch of every later optimizer step; give {arg(setting, a)}{other} to continue "
                    "it"), []
    notes = []
    if saved.get("batch_size") not in (None, now.get("batch_size")) and now.get("batch_size") is not None:
        notes.append(f"batch size per process {saved['batch_size']} then, {now['batch_size']} now: the same global "
                     f"batch of {_global(now)}")
    elif None not in (_global(saved), _global(now)) and _global(saved) != _global(now):
        keeps = global_batch_size(saved, now)
        notes.append(f"global batch {_global(saved)} then, {_global(now)} now (another data-parallel size)"
                     + (f": a batch size per process of {keeps} keeps it" if keeps else ""))
    for fact, text in MAY_DIFFER:
        a, b = saved.get(fact), now.get(fact)
        if a is not None and b is not None and a != b:
            notes.append(text.format(saved=a, now=b))
    return None, notes


def resume_facts(workload) -> dict:
    """What a run of `workload` records for a resume to agree with, beside the run's own facts:
    a language model's tokens per sequence (None elsewhere: not compared)."""
    seq_len = getattr(workload, "seq_len", None)
    return {"seq_len": seq_len} if seq_len is not None else {}


def _global(facts: dict) -> Optional[int]:
    parts = [facts.get(k) for k in ("batch_size", "data_parallel_size", "grad_accum")]
    return parts[0] * parts[1] * parts[2] if all(isinstance(v, int) for v in parts) else None


def same_global_batch(saved: dict, now: dict) -> bool:
    """Whether both runs' optimizer steps see as many samples (batch × data-parallel size ×
    micro-steps), where both recorded them."""
    a, b = _global(saved), _global(now)
    return a is not None and a == b


def global_batch_size(saved: dict, now: dict) -> Optional[int]:
    """The batch per process that gives this run the saved global batch, where one does."""
    total, per = _global(saved), now.get("data_parallel_size", 0) * (now.get("grad_accum") or 0)
    return total // per if total and per and total % per == 0 else None


def read_facts(folder: Path) -> dict:
    """The facts a checkpoint recorded (its meta.json), {} when unreadable."""
    try:
        meta = json.loads((Path(folder) / META_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return meta.get("facts", {}) if isinstance(meta, dict) else {}
