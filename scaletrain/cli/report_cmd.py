"""`scaletrain report RUN_DIR [RUN_DIR ...]`: the runs' curves as PNGs and a comparison table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..foundation.errors import UsageError

NAME = "report"
HELP = ("draw runs' loss, held-out accuracy and samples/s curves (PNG) and print a table comparing them; explain "
        "a hang's dump (which rank is stuck, in which collective, which ranks never entered it)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="folders written by `scaletrain train` (its --out); several are drawn on the same figures. A "
                        "hang's dump (RUN_DIR/hang-N, or a run folder that holds one) is explained in words")
    p.add_argument("--out", type=Path, default=Path("report"), metavar="DIR",
                   help="where the PNGs and comparison.md go (default: ./report; files there are replaced)")


def explain_hangs(folders: list[Path]) -> list[Path]:
    """Prints what every hang dump among (or inside) `folders` shows; returns the folders
    that are runs to draw (a dump folder itself is not)."""
    from ..fault import hang_report

    from ..train.report import METRICS_FILE

    runs = []
    for folder in folders:
        dumps = hang_report.dumps_in(folder)
        for dump in dumps:
            print(hang_report.plain_words(dump), end="\n\n", flush=True)
        if not dumps or (folder / METRICS_FILE).exists():  # a run (with its curves), not a dump alone
            runs.append(folder)
    return runs


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..compare import figures, table
    from ..compare.runs import load_runs
    from ..foundation.safe_files import write_text_atomic

    folders = explain_hangs(args.runs)
    if not folders:
        return 0  # hang dumps only: nothing to draw
    runs = load_runs(folders)
    for note in (note for run in runs for note in run.notes):
        print(f"scaletrain: note: {note}", file=sys.stderr)
    try:
        import matplotlib  # noqa: F401  (found out before anything is written)
    except ImportError:
        raise UsageError("report draws with matplotlib, which is not installed; "
                         "pip install matplotlib (a dependency of scaletrain: reinstall scaletrain to get it)") from None
    out = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; name a folder for the report")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out} cannot be created ({exc.strerror}); choose another folder") from None
    written = figures.draw(runs, out)
    write_text_atomic(out / "comparison.md", table.markdown(runs))
    shown = Table(title=f"{len(runs)} run(s)", title_justify="left")
    for column in table.COLUMNS:
        shown.add_column(column, justify="left" if column in ("run", "strategy", "world size") else "right")
    for row in table.rows(runs):
        shown.add_row(*row)
    console = Console(highlight=False)
    if not console.is_terminal:  # a log file: the whole table on one line per run, not squeezed to 80
        console.width = 160
    console.print(shown)
    for line in table.expert_lines(runs):
        console.print(f"tokens per expert per step, {line}", soft_wrap=True)
    console.print(f"wrote {', '.join(str(p) for p in written)} and {out / 'comparison.md'}", soft_wrap=True)
    return 0
