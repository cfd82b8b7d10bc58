"""What a training run shows and writes, on rank 0 only.

- On a terminal: a progress bar and one line per epoch. Otherwise (a log file, a batch
  job): a plain line per step record instead of the bar, flushed at once, no control codes.
  Whether stdout is a terminal is the launching command's answer when it gave one (mpirun
  hands its ranks a pseudo-terminal even when its own output goes to a file).
- `metrics.jsonl`: one JSON line per record, `"kind": "step"` (every few steps) or
  `"kind": "epoch"` (held-out metrics). A resumed run first drops the records of the steps
  and epochs it is about to do again, so no step or epoch appears twice.
- The experiment trackers' scalars, configuration and summary.
- `summary.json`, written atomically at the end.

Both files are strict JSON: a NaN or infinite number (a run going on with
--allow-nonfinite) is written as null and its key listed under "non_finite".
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Optional

from ..foundation.errors import as_flags
from ..foundation.safe_files import append_jsonl, write_json_atomic, write_text_atomic, writing
from ..launchers.launch_plan import stdout_is_terminal
from ..track import Trackers
from .steps import format_eta

SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"


#: Held-out metrics a task may report, in the order shown, with their short names in a line.
EVAL_METRICS = {"loss": "loss", "accuracy": "acc", "perplexity": "ppl"}


class Reporter:
    """Does nothing on ranks other than 0: N processes must not print N copies."""

    def __init__(self, is_main: bool, out: Path, trackers: Optional[Trackers] = None):
        self.is_main = is_main
        self.out = Path(out)
        self.terminal = stdout_is_terminal()
        self._console = None
        self.trackers = trackers or Trackers([])
        self.wall_offset = 0.0  # seconds of the run before this process (a resumed run)
        self._resumed_at: Optional[int] = None
        self._recorded_epochs: set = set()  # complete before a resume, recorded then
        if is_main:
            self.out.mkdir(parents=True, exist_ok=True)

    @property
    def console(self):
        """rich's console, for a terminal's bar and the summary table (made when first needed)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=sys.stdout, highlight=False, force_terminal=self.terminal)
        return self._console

    def say(self, text: str) -> None:
        if not self.is_main:
            return
        text = as_flags(text)  # settings named in a note, as the flags the user types
        if self.terminal:
            self.console.print(text, soft_wrap=True, markup=False)
            self.console.file.flush()
        else:
            print(text, flush=True)  # a log file sees it now, not when the buffer fills

    def start_at(self, step: int, epoch: int) -> bool:
        """Called as training begins (everything is built, any checkpoint loaded); metrics.jsonl
        exists from then on. The run continues after `step`, in `epoch` (1-based): the records of what is about
        to be done again are dropped. An epoch whose last step is `step` keeps its record (its
        checkpoint was taken before its evaluation), and is not recorded again. True when the
        folder held records of an earlier attempt (the trackers then drop theirs too)."""
        path = self.out / METRICS_FILE
        if not self.is_main:
            return False
        if not path.exists():
            with writing(path):
                path.touch()  # training begins: the folder now holds a run (see cli/outdir.discard_unstarted)
            return False
        kept = [r for r in read_records(path) if _before(r, step, epoch)]
        with writing(path):
            write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
        self.wall_offset = max((r.get("wall_seconds") or 0.0 for r in kept), default=0.0)
        self._recorded_epochs = {r.get("epoch") for r in kept if r.get("kind") != "step"}
        self._resumed_at = step if step else None
        return True

    @contextlib.contextmanager
    def progress(self, total: int, label: str):
        """Yields a function to call once per step. A bar only on an interactive terminal."""
        if not (self.is_main and self.terminal):
            yield lambda: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # a terminal's

        bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=self.console, transient=True)
        with bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)

    def step(self, record: dict) -> None:
        if not self.is_main:
            return
        with writing(self.out / METRICS_FILE):
            append_jsonl(self.out / METRICS_FILE, strict_json(record))
        scalars = {"train/lr": record["lr"], "train/samples_per_second": record["samples_per_second"],
                   "train/tflops_per_second": record.get("tflops_per_second"), "train/mfu": record.get("mfu"),
                   "train/expert_load_max_over_mean": record.get("expert_load_max_over_mean")}
        if "train_loss" in record:
            scalars["train/loss"] = record["train_loss"]
        self.trackers.log({k: v for k, v in scalars.items() if v is not None}, record["step"])
        if not self.terminal:  # the bar shows progress on a terminal
            loss = f"loss {record['train_loss']:.4f}" if "train_loss" in record else "loss (on the last stage)"
            lr = f"  lr {record['lr']:.3g}" if record["lr"] is not None else ""
            mfu = f"  MFU {record['mfu']:.1%}" if record.get("mfu") is not None else ""
            print(f"step {record['step']:>6}/{record['total_steps']}  epoch {record['epoch']}/{record['epochs']}  "
                  f"{loss}{lr}  {record['samples_per_second']:,.0f} samples/s{mfu}{expert_load(record)}  "
                  f"ETA {format_eta(record['eta_seconds'])}", flush=True)

    def epoch(self, record: dict) -> None:
        if not self.is_main or record["epoch"] in self._recorded_epochs:
            return
        if self._resumed_at is not None:  # the first epoch record after a resume says so
            record = {**record, "resumed_at_step": self._resumed_at}
            self._resumed_at = None
        if not record["samples_per_second"]:
            # No batch of it trained here: a run resumed from a checkpoint taken at the epoch's
            # end (into another folder, or killed before the epoch's record): its speed was
            # measured by the run that trained it, not 0.
            record = {**record, "samples_per_second": None}
        with writing(self.out / METRICS_FILE):
            append_jsonl(self.out / METRICS_FILE, strict_json(record))
        self.trackers.log({**{f"eval/{name}": record[f"eval_{name}"] for name in EVAL_METRICS
                              if record.get(f"eval_{name}") is not None},
                           "train/epoch_loss": record["train_loss"],
                           **({"train/epoch_samples_per_second": record["samples_per_second"]}
                              if record["samples_per_second"] is not None else {}),
                           "epoch": record["epoch"]}, record["step"])
        held_out = "  ".join(f"held-out {EVAL_METRICS[name]} {record[f'eval_{name}']:.4f}" for name in EVAL_METRICS
                             if record.get(f"eval_{name}") is not None) if record["eval_samples"] else \
            "held-out: none (the held-out set is empty)"
        speed = (f"{record['samples_per_second']:,.0f} samples/s" if record["samples_per_second"] is not None else
                 "trained before the resume")
        self.say(f"epoch {record['epoch']:>3}/{record['epochs']}  loss {record['train_loss']:.4f}  {held_out}  {speed}")

    def finish(self, summary: dict) -> None:
        if not self.is_main:
            return
        with writing(self.out / SUMMARY_FILE):
            write_json_atomic(self.out / SUMMARY_FILE, strict_json(summary))
        self.trackers.finish({k: v for k, v in summary.items() if v is not None})  # they drop NaN/inf themselves
        from rich.table import Table

        table = Table(title="scaletrain summary", show_header=False, title_justify="left")
        table.add_column("what", style="bold")
        table.add_column("value", overflow="fold")
        rows = [
            ("strategy", summary["strategy"]),
            ("world size", f"{summary['world_size']} ({summary['nnodes']} node(s) × {summary['nproc_per_node']} "
                           f"process(es), launcher {summary['launcher']})"),
            ("backend / device", f"{summary['backend']} / {summary['device']}, "
                                 f"{summary['threads_per_process']} thread(s) per process"),
            ("workload", summary["workload"]),
            ("global batch", f"{summary['global_batch_size']} (lr {summary['lr']:g})"),
            *[(f"held-out {name}", f"{summary[f'final_{name}']:.4f}") for name in EVAL_METRICS
              if summary.get(f"final_{name}") is not None],
            ("held-out samples", summary["eval_samples"]),
            ("samples/s", f"{summary['samples_per_second']:,.0f}"),
            ("TFLOP/s, MFU", _utilisation(summary)),
            ("start-up to first step", _seconds(summary.get("startup_seconds"), "from the command")),
            *([("peak memory / process", _peak_memory(summary))] if summary.get("peak_memory_bytes") else []),
            *([("tokens per expert", _expert_tokens(summary))] if summary.get("expert_tokens_per_step") else []),
            ("wall time", f"{summary['wall_seconds']:.1f} s from the command"),
            ("written", str(self.out / SUMMARY_FILE)),
        ]
        for key, value in rows:
            table.add_row(key, str(value))
        self.console.print(table)
        self.console.file.flush()


def _utilisation(summary: dict) -> str:
    """'0.52 TFLOP/s, MFU 31.0% (peak: …)', or why there is no MFU."""
    if summary.get("tflops_per_second") is None:
        return summary.get("mfu_note") or "not counted"
    text = f"{summary['tflops_per_second']:.3g} TFLOP/s"
    if summary.get("mfu") is not None:
        return text + f", MFU {summary['mfu']:.1%} (peak {summary['peak_tflops_per_second']:.3g} TFLOP/s: " \
                      f"{summary['peak_source']})"
    return text + f"; no MFU: {summary.get('mfu_note')}"


def expert_load(record: dict) -> str:
    """A step line's mixture-of-experts part: '  experts 131/125/… max/mean 1.05' (the first layer's
    tokens per expert, the worst layer's balance), '' for a dense model."""
    tokens = record.get("expert_tokens")
    if not tokens:
        return ""
    first = "/".join(f"{v:.0f}" for v in tokens[0][:8]) + ("/…" if len(tokens[0]) > 8 else "")
    return f"  experts {first} max/mean {record['expert_load_max_over_mean']:.2f}"


def _expert_tokens(summary: dict) -> str:
    """'layer 0: 131/125/…, layer 1: …; max/mean 1.05 (per step)' for the summary table."""
    layers = summary["expert_tokens_per_step"]
    shown = "; ".join(f"layer {i}: " + "/".join(f"{v:.0f}" for v in layer) for i, layer in enumerate(layers[:4]))
    more = f"; … {len(layers) - 4} more layer(s)" if len(layers) > 4 else ""
    return f"{shown}{more} per step; max/mean {summary['expert_load_max_over_mean']:.2f} (summary.json holds all)"


def _peak_memory(summary: dict) -> str:
    """'412 MB (baseline 318 MB), the largest of 2 processes' for the summary table."""
    peaks, bases = summary["peak_memory_bytes"], summary.get("baseline_memory_bytes") or []
    worst = max(range(len(peaks)), key=lambda r: peaks[r])
    base = f" (baseline {bases[worst] / 1e6:,.0f} MB)" if worst < len(bases) else ""
    why = f" ({summary['allocator_reason']})" if summary.get("allocator_reason") else ""
    allocator = f"; allocator {summary['allocator']}{why}" if summary.get("allocator") else ""
    return (f"{peaks[worst] / 1e6:,.0f} MB{base}" + (f", the largest of {len(peaks)} processes" if len(peaks) > 1 else "")
            + allocator)


def strict_json(record: dict) -> dict:
    """`record` with NaN and infinite numbers as None, their keys listed under "non_finite"
    (JSON has no NaN: strict readers reject the token Python would write)."""
    bad = sorted(k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v))
    if not bad:
        return record
    return {**record, **{k: None for k in bad}, "non_finite": bad}


def read_records(path: Path) -> list[dict]:
    """metrics.jsonl's records; a line cut short by a crash is skipped."""
    records = []
    for line in Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _before(record: dict, step: int, epoch: int) -> bool:
    """Whether `record` describes work done before a resume at `step` in `epoch`."""
    if record.get("kind") == "step":
        return record["step"] <= step
    if record.get("kind") == "epoch" and record["step"] <= step:
        return True
    return record.get("epoch", 0) < epoch  # also metrics.jsonl lines without a kind


def _seconds(value, note: str) -> str:
    return "unknown" if value is None else f"{value:.1f} s {note}"
