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

from ..foundation.defaults import BACKGROUND_GROUP

VERDICT_FILE = "hang.json"
TEXT_FILE = "hang.txt"
_ELEMENT_BYTES = {"Float": 4, "Double": 8, "BFloat16": 2, "Half": 2, "Long": 8, "Int": 4, "Short": 2, "Byte": 1,
                  "Char": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1}


def is_dump(folder: Path) -> bool:
    """A hang's dump folder: its verdict, or (a dump cut short, its verdict never written) the
    ranks' own files."""
    folder = Path(folder)
    return (folder / VERDICT_FILE).is_file() or (folder.is_dir() and any(
        p.is_file() for pattern in ("rank-*-stacks.txt", "rank-*-collectives.json") for p in folder.glob(pattern)))


def dumps_in(folder: Path) -> list[Path]:
    """The hang dump folders of a run's folder (or the folder itself, if it is one)."""
    folder = Path(folder)
    if is_dump(folder):
        return [folder]
    return sorted(p for p in folder.glob("hang-*") if is_dump(p)) if folder.is_dir() else []


def _read_json(path: Path) -> tuple[object, Optional[str]]:
    """(what the file holds, None) or (None, why it cannot be read): the files of a dump are
    written by processes being killed, and may be cut short."""
    try:
        return json.loads(path.read_text(errors="replace")), None
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    except ValueError as exc:
        return None, f"damaged ({str(exc).splitlines()[0][:80]})"


def load(folder: Path) -> tuple[dict, dict]:
    """(the verdict, {rank: record}). A verdict that is missing or damaged is an empty one whose
    "problems" say so; a rank's file that is damaged or not a record is left out, named there."""
    folder = Path(folder)
    verdict, problem = _read_json(folder / VERDICT_FILE)
    problems = []
    if not isinstance(verdict, dict):
        problems.append(f"{VERDICT_FILE} is {problem or f'a {type(verdict).__name__}, not a verdict'}")
        verdict = {}
    records = {}
    for path in sorted(folder.glob("rank-*-collectives.json")):
        data, problem = _read_json(path)
        rank = data.get("rank") if isinstance(data, dict) else None
        if isinstance(rank, int) and not isinstance(rank, bool):
            records[rank] = data
        else:
            problems.append(f"{path.name} is {problem or 'not a rank' + chr(39) + 's record'}")
    return {**verdict, "problems": problems + list(verdict.get("problems") or [])}, records


def _entries(record: Optional[dict], key: str) -> list[dict]:
    """A record's list of collectives, without what is not one (a damaged file)."""
    found = (record or {}).get(key)
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def _number(value, default: float = 0.0) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def analyse(verdict: dict, records: dict) -> dict:
    """{"collective": the stuck one or None, "kind": "flight recorder" | "scaletrain's record",
    "entered", "never", "unknown": ranks, "stale": {rank: (seconds, step)}}. The stuck one is
    the oldest unfinished collective of the rank that found the hang, training's before those
    of scaletrain's background threads (a checkpoint being written). A rank whose record was
    taken before that collective began (a stopped rank's last published one) cannot show
    whether it entered it: it is among the unknown, in "stale" with how much older it is."""
    world = int(_number(verdict.get("world_size")) or (max(records) + 1 if records else 0))
    detector = records.get(verdict.get("detected_by"))
    for kind, key in (("torch's flight recorder", "flight_recorder"), ("scaletrain's record", "scaletrain_ops")):
        pending = [e for e in _entries(detector, key) if not e.get("done") and e.get("seq") is not None]
        if not pending:
            continue
        training = [e for e in pending if not str(e.get("group") or "").startswith(BACKGROUND_GROUP)]
        stuck = (training or pending)[0]
        began = _began(stuck)
        entered, never, unknown, stale = [], [], [], {}
        for rank in range(world):
            record = records.get(rank) or {}
            seqs = {e["seq"] for e in _entries(record, key) if e.get("group") == stuck.get("group")
                    and e.get("seq") is not None}
            taken = _number(record.get("time"), None)
            if stuck["seq"] in seqs:
                entered.append(rank)
            elif began is not None and taken is not None and taken < began:
                unknown.append(rank)
                stale[rank] = (began - taken, record.get("step"))
            elif seqs and max(seqs) < stuck["seq"]:
                never.append(rank)
            else:
                unknown.append(rank)
        return {"collective": stuck, "kind": kind, "entered": entered, "never": never, "unknown": unknown,
                "stale": stale}
    return {"collective": None, "kind": None, "entered": [], "never": [], "unknown": list(range(world)), "stale": {}}


def _began(collective: dict) -> Optional[float]:
    """When a collective began (seconds since the epoch), where its record says."""
    if _number(collective.get("created_ns"), None) is not None:
        return collective["created_ns"] / 1e9
    return _number(collective.get("started"), None)


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
        for rank, (older, step) in sorted(found.get("stale", {}).items()):
            where += f" (rank {rank}'s record is {older:.0f} s older than it{_at_step(step)}: not known whether it entered)"
    return f"{where}; stacks and collectives of every rank in {folder} (scaletrain report {folder})"


def _at_step(step) -> str:
    return f", from step {step}" if isinstance(step, int) else ""


def _heading(verdict: dict) -> list[str]:
    """The verdict's lines: who found the hang, and which ranks were stuck; what of the dump
    could not be read."""
    out = [f"The dump's {problem}." for problem in verdict.get("problems") or []]
    if "detected_by" not in verdict:
        return out + ["No verdict: what the ranks' own files show follows."]
    out.append(f"Hang found by rank {verdict.get('detected_by')} at {verdict.get('when', '?')}: it waited "
               f"{_number(verdict.get('waited_s')):.0f} s in {verdict.get('where', verdict.get('op'))} "
               f"(--timeout {verdict.get('timeout', '?')}).")
    for key, said in (("silent", "stopped responding"), ("behind", "is alive but did not arrive")):
        found = verdict.get(key)
        for rank, details in sorted(found.items() if isinstance(found, dict) else [], key=lambda kv: str(kv[0])):
            out.append(f"Stuck: rank {rank} {said} ({details}).")
    never = verdict.get("never_reported")
    for rank in never if isinstance(never, list) else []:
        out.append(f"Stuck: rank {rank} never reported at all.")
    return out


def plain_words(folder: Path) -> str:
    verdict, records = load(folder)
    found = analyse(verdict, records)
    out = _heading(verdict)
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
        stale = found.get("stale", {})
        for rank, (older, step) in sorted(stale.items()):
            out.append(f"Not known for rank {rank}: its record was taken {older:.0f} s before that collective "
                       f"began{_at_step(step)} (its last published one; the rank did not answer).")
        rest = [r for r in found["unknown"] if r not in stale]
        if rest:
            out.append(f"Not known for {_ranks(rest)} (its record does not reach that far).")
    out.append("Where each rank's training thread was (innermost frame last):")
    for rank in sorted(records):
        rec = records[rank]
        where = rec.get("where")
        frames = " → ".join(map(str, where)) if isinstance(where, list) and where else "(no stack)"
        out.append(f"  rank {rank} ({rec.get('source', '?')}{_at_step(rec.get('step'))}): {frames}")
    stacks = sorted(int(p.name.split("-")[1]) for p in Path(folder).glob("rank-*-stacks.txt")
                    if p.name.split("-")[1].isdigit())
    world = int(_number(verdict.get("world_size"))) or (max([*records, *stacks]) + 1 if records or stacks else 0)
    missing = [r for r in range(world) if r not in records]
    if missing:
        out.append(f"No record of collectives from {_ranks(missing)}"
                   + (f"; {'its' if len(missing) == 1 else 'their'} stacks are there." if set(missing) <= set(stacks) else "."))
    out.append(f"Files: {folder}/rank-N-stacks.txt (every thread's stack), rank-N-collectives.json (last collectives).")
    return "\n".join(out)


def write_text(folder: Path) -> Optional[str]:
    try:
        text = plain_words(folder)
    except (OSError, ValueError):
        return None
    (Path(folder) / TEXT_FILE).write_text(text + "\n")
    return text
