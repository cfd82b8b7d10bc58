"""What a training run shows and writes: a progress bar and one line per epoch on rank 0,
`metrics.jsonl` (one line per epoch) and `summary.json` (written atomically at the end)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..files import append_jsonl, write_json_atomic

SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"


class Reporter:
    """Does nothing on ranks other than 0: N processes must not print N copies."""

    def __init__(self, is_main: bool, out: Path):
        self.is_main = is_main
        self.out = Path(out)
        self.console = Console(file=sys.stdout, highlight=False)
        if is_main:
            self.out.mkdir(parents=True, exist_ok=True)

    def say(self, text: str) -> None:
        if self.is_main:
            self.console.print(text, soft_wrap=True)

    @contextlib.contextmanager
    def progress(self, total: int, label: str):
        """Yields a function to call once per step. A bar only on an interactive terminal."""
        if not (self.is_main and self.console.is_terminal):
            yield lambda: None
            return
        bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=self.console, transient=True)
        with bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)

    def epoch(self, record: dict) -> None:
        if not self.is_main:
            return
        append_jsonl(self.out / METRICS_FILE, record)
        self.say(f"epoch {record['epoch']:>3}/{record['epochs']}  loss {record['train_loss']:.4f}  "
                 f"held-out loss {record['eval_loss']:.4f}  held-out acc {record['eval_accuracy']:.4f}  "
                 f"{record['samples_per_second']:,.0f} samples/s")

    def finish(self, summary: dict) -> None:
        if not self.is_main:
            return
        write_json_atomic(self.out / SUMMARY_FILE, summary)
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
            ("held-out accuracy", f"{summary['final_accuracy']:.4f} on {summary['eval_samples']} samples"),
            ("held-out loss", f"{summary['final_loss']:.4f}"),
            ("samples/s", f"{summary['samples_per_second']:,.0f}"),
            ("start-up to first step", _seconds(summary.get("startup_seconds"), "from the command")),
            ("wall time", f"{summary['wall_seconds']:.1f} s from the command"),
            ("written", str(self.out / SUMMARY_FILE)),
        ]
        for key, value in rows:
            table.add_row(key, str(value))
        self.console.print(table)


def _seconds(value, note: str) -> str:
    return "unknown" if value is None else f"{value:.1f} s {note}"
