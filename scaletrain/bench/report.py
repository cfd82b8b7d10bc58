"""What `scaletrain bench` shows and writes: a terminal table, bench.json and bench.md."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from ..files import write_json_atomic
from ..measure.console import table_console

JSON_FILE, MARKDOWN_FILE = "bench.json", "bench.md"

_COLUMNS = ["configuration", "procs × threads", "global batch", "samples/s", "speedup", "efficiency",
            "predicted", "compute ms", "comm ms", "data ms", "optimizer ms", "idle ms"]


def _ms(seconds) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.1f}"


def _cells(row: dict, accuracy: bool) -> list[str]:
    predicted = row.get("predicted_speedup")
    cells = [row["label"], f"{row['nproc']} × {row['threads_per_process']}", str(row["global_batch_size"]),
             f"{row['samples_per_s']:,.0f}", f"{row['speedup']:.2f}×", f"{row['efficiency']:.0%}",
             "" if predicted is None else f"{predicted:.2f}×",
             _ms(row.get("compute_s")), _ms(row.get("exposed_comm_s")), _ms(row.get("data_s")),
             _ms(row.get("optimizer_s")), _ms(row.get("idle_s"))]
    if accuracy:
        cells += [f"{row['lr']:.2g} ({row['lr_scaling']})", f"{row.get('eval_accuracy', float('nan')):.3f}"]
    return cells


def columns(accuracy: bool) -> list[str]:
    return _COLUMNS + (["lr (rule)", "held-out acc"] if accuracy else [])


def print_table(rows: list[dict], title: str, accuracy: bool) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns(accuracy):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for row in rows:
        table.add_row(*_cells(row, accuracy))
    table_console().print(table)


def markdown(rows: list[dict], title: str, accuracy: bool) -> str:
    head = columns(accuracy)
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    lines += ["| " + " | ".join(_cells(row, accuracy)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, document: dict, title: str, accuracy: bool) -> list[Path]:
    write_json_atomic(out / JSON_FILE, document)
    (out / MARKDOWN_FILE).write_text(markdown(document["configurations"], title, accuracy))
    return [out / JSON_FILE, out / MARKDOWN_FILE]
