"""The GPU checks' results file: one line per check (passed, failed or skipped, and what it
measured), every figure, the machine and the versions, as `gpu-check.json` and
`gpu-check.md` in one folder. Pure: no torch, no pytest."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

JSON_NAME, MARKDOWN_NAME = "gpu-check.json", "gpu-check.md"
MARK = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}
#: The order the checks are listed in (pytest runs the files alphabetically).
GROUPS = ("strategies", "memory", "speed", "tools", "faults")


@dataclass
class Check:
    group: str            # strategies, memory, speed, tools, faults
    name: str             # "ddp ×2 bf16"
    result: str           # passed, failed, skipped
    line: str             # what it measured, or why it failed or was skipped
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)

    def text(self) -> str:
        return f"{MARK[self.result]:4}  {self.group}: {self.name} — {self.line}"


@dataclass
class Results:
    target: str                       # what ran the checks ("1 CUDA GPU(s), NCCL")
    machine: dict
    checks: list[Check] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def ordered(self) -> list[Check]:
        return sorted(self.checks, key=lambda c: GROUPS.index(c.group) if c.group in GROUPS else len(GROUPS))

    def counts(self) -> dict:
        return {kind: sum(c.result == kind for c in self.checks) for kind in MARK}

    def ran(self) -> bool:
        return any(c.result != "skipped" for c in self.checks)

    def as_dict(self) -> dict:
        return {"target": self.target, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.started)),
                "seconds": round(time.time() - self.started, 1), "counts": self.counts(), "machine": self.machine,
                "checks": [asdict(c) for c in self.ordered()]}

    def write(self, folder: Path) -> Path:
        """Writes both files (each whole or not at all); returns the Markdown file's path."""
        folder.mkdir(parents=True, exist_ok=True)
        data = self.as_dict()
        _write_atomically(folder / JSON_NAME, json.dumps(data, indent=1, default=str) + "\n")
        markdown = folder / MARKDOWN_NAME
        _write_atomically(markdown, to_markdown(data))
        return markdown


def _write_atomically(path: Path, text: str) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    part.replace(path)


def machine_lines(machine: dict) -> list[str]:
    if "error" in machine:
        return [f"- machine: not read ({machine['error']})"]
    gpus = machine.get("gpus") or []
    if gpus:
        names = {}
        for gpu in gpus:
            key = f"{gpu['name']} ({gpu['memory_bytes'] / 2**30:.1f} GiB, compute capability {gpu['compute_capability']})"
            names[key] = names.get(key, 0) + 1
        described = ", ".join(f"{n} × {key}" for key, n in names.items())
        driver = f", driver {machine['driver']}" if machine.get("driver") else ""
        lines = [f"- GPUs: {described}{driver}"]
    else:
        lines = ["- GPUs: none"]
    lines.append(f"- CPU: {machine.get('cpu', '?')}")
    versions = machine.get("versions", {})
    lines.append("- versions: " + ", ".join(f"{name} {value}" for name, value in versions.items() if value is not None))
    return lines


def to_markdown(data: dict) -> str:
    counts = data["counts"]
    lines = [f"# GPU check, {data['started']}", "",
             f"Checked on {data['target']}: {counts['passed']} passed, "
             f"{counts['failed']} failed, {counts['skipped']} skipped in {data['seconds']:.0f} s.", "",
             *machine_lines(data["machine"]), "",
             "| check | result | s | what it measured (or why not) |", "|---|---|---:|---|"]
    for c in data["checks"]:
        line = c["line"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {c['group']}: {c['name']} | {MARK[c['result']]} | {c['seconds']:.1f} | {line} |")
    lines += ["", f"Every figure of every check is in `{JSON_NAME}` (`checks[].figures`).", ""]
    return "\n".join(lines)
