"""Reading a hang's dump folder: which rank is stuck, the collective the job is stuck in, the
ranks that never entered it — in one line for the job's error, and in plain words for
`scaletrain report`.

A dump folder holds `hang.json` (what the watchdog that found the hang saw: who waited, in
what, which ranks were silent or elsewhere) and, per rank, `rank-N-stacks.txt` and
`rank-N-collectives.json` (hang_evidence.py). The stuck collective is the oldest unfinished one of
the rank that found the hang, in torch's flight recorder where there is one (every rank's
collectives in a process group are numbered alike, so the numbers compare across ranks),
else in scaletrain's own record of the operations it ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

VERDICT_FILE = "hang.json"
TEXT_FILE = "hang.txt"
_ELEMENT_BYTES = {"Float": 4, "Double": 8, "BFloat16": 2, "Half": 2, "Long": 8, "Int": 4, "Short": 2, "Byte": 1,
                  "Char": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1}


def is_dump(folder: Path) -> bool:
    return (Path(folder) / VERDICT_FILE).is_file()


def dumps_in(folder: Path) -> list[Path]:
    """The hang dump folders of a run's folder (or the folder itself, if it is one)."""
    folder = Path(folder)
    if is_dump(folder):
        return [folder]
    return sorted(p for p in folder.glob("hang-*") if is_dump(p)) if folder.is_dir() else []


def load(folder: Path) -> tuple[dict, dict]:
    folder = Path(folder)
    verdict = json.loads((folder / VERDICT_FILE).read_text())
    records = {}
    for path in folder.glob("rank-*-collectives.json"):
        try:
            data = json.loads(path.read_text())
            records[int(data["rank"])] = data
        except (OSError, ValueError, KeyError):
            continue
    return verdict, records


def analyse(verdict: dict, records: dict) -> dict:
    """{"collective": the stuck one or None, "kind": "flight recorder" | "scaletrain's record",
    "entered", "never", "unknown": ranks}."""
    world = int(verdict.get("world_size") or (max(records) + 1 if records else 0))
    detector = records.get(verdict.get("detected_by"))
    for kind, key in (("torch's flight recorder", "flight_recorder"), ("scaletrain's record", "scaletrain_ops")):
        entries = (detector or {}).get(key) or []
        pending = [e for e in entries if not e.get("done") and e.get("seq") is not None]
        if not pending:
            continue
        stuck = pending[0]
        group = stuck.get("group")
        entered, never, unknown = [], [], []
        for rank in range(world):
            mine = [e for e in ((records.get(rank) or {}).get(key) or []) if e.get("group") == group
                    and e.get("seq") is not None]
            seqs = {e["seq"] for e in mine}
            if stuck["seq"] in seqs:
                entered.append(rank)
            elif seqs and max(seqs) < stuck["seq"]:
                never.append(rank)
            else:
                unknown.append(rank)
        return {"collective": stuck, "kind": kind, "entered": entered, "never": never, "unknown": unknown}
    return {"collective": None, "kind": None, "entered": [], "never": [], "unknown": list(range(world))}


def describe(collective: dict) -> str:
    """'all_reduce #9 of default_pg (id 0), 1,024 × Float (4.1 kB)' or 'all-reduce #12 (4.1 kB)'."""
    name = f"{collective.get('name')} #{collective.get('seq')}"
    if collective.get("group"):
        name += f" of process group {collective['group']}"
    size = _size(collective)
    return f"{name}{f', {size}' if size else ''}"


def _size(collective: dict) -> str:
    if collective.get("bytes") is not None:
        return _human(collective["bytes"])
    sizes, dtypes = collective.get("sizes") or [], collective.get("dtypes") or []
    if not sizes:
        return ""
    total = 0
    for shape, dtype in zip(sizes, dtypes):
        n = 1
        for d in shape:
            n *= d
        total += n * _ELEMENT_BYTES.get(dtype, 4)
    shapes = ", ".join("×".join(f"{d:,}" for d in shape) or "scalar" for shape in sizes[:3])
    return f"{shapes} {dtypes[0] if dtypes else ''} ({_human(total)})".replace("  ", " ")


def _human(nbytes: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1000
    return ""


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def stuck_ranks(verdict: dict) -> list[int]:
    return sorted({int(r) for r in (verdict.get("silent") or {})} | {int(r) for r in (verdict.get("behind") or {})}
                  | {int(r) for r in verdict.get("never_reported") or []})


def line(verdict: dict, found: dict, folder: Path) -> str:
    """The clause the job's one error line ends with."""
    collective = found["collective"]
    if collective is None:
        where = "no collective of the job is unfinished in the records"
    else:
        where = f"the job is stuck in {describe(collective)}"
        if found["never"]:
            where += f", which {_ranks(found['never'])} never entered"
        elif found["entered"] and not found["unknown"]:
            where += ", which every rank entered"
    return f"{where}; stacks and collectives of every rank in {folder} (scaletrain report {folder})"


def plain_words(folder: Path) -> str:
    verdict, records = load(folder)
    found = analyse(verdict, records)
    out = [f"Hang found by rank {verdict.get('detected_by')} at {verdict.get('when', '?')}: it waited "
           f"{verdict.get('waited_s', 0):.0f} s in {verdict.get('where', verdict.get('op'))} "
           f"(--timeout {verdict.get('timeout', '?')})."]
    for rank, details in sorted((verdict.get("silent") or {}).items(), key=lambda kv: int(kv[0])):
        out.append(f"Stuck: rank {rank} stopped responding ({details}).")
    for rank, details in sorted((verdict.get("behind") or {}).items(), key=lambda kv: int(kv[0])):
        out.append(f"Stuck: rank {rank} is alive but did not arrive ({details}).")
    for rank in verdict.get("never_reported") or []:
        out.append(f"Stuck: rank {rank} never reported at all.")
    collective = found["collective"]
    if collective is None:
        out.append("No unfinished collective is in the records (no flight recorder, and no marked operation).")
    else:
        out.append(f"The job is stuck in {describe(collective)} (from {found['kind']}).")
        if found["never"]:
            out.append(f"{_ranks(found['never']).capitalize()} never entered it"
                       f"{'; ' + _ranks(found['entered']) + ' did' if found['entered'] else ''}.")
        elif found["entered"]:
            out.append(f"{'Every rank' if not found['unknown'] else _ranks(found['entered']).capitalize()} entered it; "
                       "none finished it.")
        if found["unknown"]:
            out.append(f"Not known for {_ranks(found['unknown'])} (its record does not reach that far).")
    out.append("Where each rank's training thread was (innermost frame last):")
    for rank in sorted(records):
        rec = records[rank]
        frames = " → ".join(rec.get("where") or []) or "(no stack)"
        out.append(f"  rank {rank} ({rec.get('source', '?')}): {frames}")
    missing = [r for r in range(int(verdict.get("world_size") or 0)) if r not in records]
    if missing:
        out.append(f"No evidence from {_ranks(missing)}.")
    out.append(f"Files: {folder}/rank-N-stacks.txt (every thread's stack), rank-N-collectives.json (last collectives).")
    return "\n".join(out)


def write_text(folder: Path) -> Optional[str]:
    try:
        text = plain_words(folder)
    except (OSError, ValueError):
        return None
    (Path(folder) / TEXT_FILE).write_text(text + "\n")
    return text
