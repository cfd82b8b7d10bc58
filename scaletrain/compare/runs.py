"""A finished (or still running) run, read back from its folder: summary.json,
metrics.jsonl and config.yaml, as `scaletrain train` writes them. A record whose figures
are not numbers (a file edited by hand, another program's line) is skipped with a note
naming its line, rather than drawn or tabled wrong."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..foundation.errors import UsageError
from ..foundation.defaults import CONFIG_FILE
from ..train.report import METRICS_FILE, SUMMARY_FILE


@dataclass
class RunRecord:
    folder: Path
    label: str
    summary: dict = field(default_factory=dict)  # empty while the run is still going
    configured: dict = field(default_factory=dict)  # strategy and processes from config.yaml (the run's start)
    notes: list = field(default_factory=list)  # records skipped, and why
    steps: list = field(default_factory=list)  # "kind": "step" records, in order
    epochs: list = field(default_factory=list)  # "kind": "epoch" records, in order

    def series(self, records: list, key: str, x: str) -> tuple[list, list]:
        points = [(r[x], r[key]) for r in records if r.get(x) is not None and r.get(key) is not None]
        return [p[0] for p in points], [p[1] for p in points]

    @property
    def facts(self) -> dict:
        """The summary's facts, and where there is none yet (a run still going, or stopped before
        its end) its configuration's strategy and processes."""
        return {**self.configured, **self.summary}

    @property
    def final(self) -> dict:
        """The last epoch's figures, from the summary when there is one."""
        last = self.epochs[-1] if self.epochs else {}
        return {"accuracy": self.summary.get("final_accuracy", last.get("eval_accuracy")),
                "loss": self.summary.get("final_loss", last.get("eval_loss")),
                "samples_per_second": self.summary.get("samples_per_second"),
                "wall_seconds": self.summary.get("wall_seconds", last.get("wall_seconds")),
                "epochs": last.get("epoch")}


def load_run(folder: Path) -> RunRecord:
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder; name a run's folder (the --out of `scaletrain train`)")
    metrics = folder / METRICS_FILE
    if not metrics.exists():
        raise UsageError(f"{folder} holds no {METRICS_FILE}: not a `scaletrain train` run folder (or it has not "
                         "finished an epoch or a step record yet)")
    run = RunRecord(folder, folder.absolute().name)
    summary = folder / SUMMARY_FILE
    if summary.exists():
        run.summary = _summary(_read(summary), summary, run.notes)
    run.configured = _configured(folder / CONFIG_FILE)
    lines = _read(metrics).splitlines()
    for number, line in enumerate(lines, start=1):
        record, problem = _record(line, last=number == len(lines))
        if problem:
            run.notes.append(f"skipped line {number} of {metrics}: {problem}")
        elif record is not None:
            (run.steps if record.get("kind") == "step" else run.epochs).append(record)
    return run


#: Fields of a record that are figures: a number or null (NaN/inf are written as null).
NUMERIC = ("step", "total_steps", "epoch", "epochs", "lr", "train_loss", "samples_per_second", "eta_seconds",
           "epoch_seconds", "wall_seconds", "eval_samples", "eval_loss", "eval_accuracy", "eval_perplexity",
           "tflops_per_second", "mfu", "expert_load_max_over_mean")


def _record(line: str, last: bool) -> tuple[Optional[dict], Optional[str]]:
    """(the record, None), (None, why it is skipped), or (None, None) for a blank line or
    the last one cut short by a crash (a killed run)."""
    if not line.strip():
        return None, None
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None, None if last else "not a JSON record"
    if not isinstance(record, dict):
        return None, f"not a record ({type(record).__name__})"
    for key in NUMERIC:
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return None, f"{key} is {value!r}, not a number"
    return record, None


#: Fields of summary.json that the table and the labels read, and the type each must have.
SUMMARY_FIELDS = {"strategy": (str,), "world_size": (int,), "nnodes": (int,), "nproc_per_node": (int,),
                  "final_accuracy": (int, float), "final_loss": (int, float), "samples_per_second": (int, float),
                  "wall_seconds": (int, float), "expert_load_max_over_mean": (int, float),
                  "expert_tokens_per_step": (list,)}


def _read(path: Path) -> str:
    """A run's file as text; a folder or an unreadable file in its place is one line."""
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not the file `scaletrain train` writes there; name a run's folder")
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"{path} cannot be read ({exc.strerror or exc}); check its permissions") from None


def _summary(text: str, path: Path, notes: list) -> dict:
    """summary.json's record, without the fields the table reads that are of the wrong type
    (each named in a note); a file that is not one record is left out with a note."""
    try:
        summary = json.loads(text)
    except json.JSONDecodeError:
        raise UsageError(f"{path} is not valid JSON; is it a `scaletrain train` run folder?") from None
    if not isinstance(summary, dict):
        notes.append(f"left out {path}: it holds a {type(summary).__name__}, not a run's summary (a JSON object)")
        return {}
    for key, types in SUMMARY_FIELDS.items():
        value = summary.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            notes.append(f"left out {key} of {path}: {value!r} is not a {'text' if types == (str,) else 'number'}")
            del summary[key]
    return summary


def _configured(path: Path) -> dict:
    """strategy, world_size, nnodes and nproc_per_node as the run's config.yaml gives them
    (what it could not know, left out: an unreadable file gives nothing)."""
    import yaml

    try:
        config = yaml.safe_load(path.read_text(errors="replace"))
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(config, dict):
        return {}
    found = {k: config[k] for k, types in SUMMARY_FIELDS.items() if k in ("strategy", "nnodes", "nproc_per_node")
             and isinstance(config.get(k), types) and not isinstance(config.get(k), bool)}
    if found.get("strategy") == "auto":  # the choice is recorded with the run's summary, not here
        return {}
    if "nproc_per_node" in found:
        found["nnodes"] = found.get("nnodes") or 1
        found["world_size"] = found["nproc_per_node"] * found["nnodes"]
    return found


def load_runs(folders: list[Path]) -> list[RunRecord]:
    runs = [load_run(f) for f in folders]
    _unique_labels(runs)
    return runs


def _unique_labels(runs: list[RunRecord]) -> None:
    """Folder names, with their parents where two runs' names are the same."""
    names = [r.label for r in runs]
    for run in runs:
        if names.count(run.label) > 1:
            run.label = f"{run.folder.absolute().parent.name}/{run.label}"
    for run in runs:
        strategy, world = run.facts.get("strategy"), run.facts.get("world_size")
        if strategy:
            run.label += f" ({strategy}, {world} proc)"


def describe_world(run: RunRecord) -> Optional[str]:
    s = run.facts
    if "world_size" not in s:
        return None
    return f"{s['world_size']} ({s.get('nnodes', 1)} node × {s.get('nproc_per_node', s['world_size'])})"
