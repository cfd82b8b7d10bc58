"""What `scaletrain bench` shows and writes: two tables (speed, and where a step's time goes),
bench.json and bench.md.

Every figure carries its spread over the rounds: rates and ratios their 95% interval in full,
times in milliseconds the interval's half-width.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.table import Table

from ..foundation.safe_files import write_json_atomic
from ..measure.console import table_console
from ..measure.spread import Spread

JSON_FILE, MARKDOWN_FILE = "bench.json", "bench.md"

_SPEED_COLUMNS = ["configuration", "procs×threads", "batch", "samples/s", "speedup", "efficiency",
                  "vs threads-only", "predicted", "error"]
_PART_COLUMNS = {"step_s": "step ms", "compute_s": "compute ms", "exposed_comm_s": "comm ms", "data_s": "data ms",
                 "optimizer_s": "optimizer ms", "idle_s": "idle ms"}


def _half(s: Optional[Spread]) -> Optional[float]:
    return (s.high - s.low) / 2 if s is not None and s.known else None


def ms_text(s: Optional[Spread]) -> str:
    """'26.0±1.2': milliseconds, the median and the interval's half-width."""
    if s is None:
        return ""
    half = _half(s)
    return f"{s.median * 1e3:.1f}" + (f"±{half * 1e3:.1f}" if half is not None else "")


def interval_text(s: Optional[Spread], fmt: str = "{:.2f}", unit: str = "×") -> str:
    return f"{fmt.format(s.low)}–{fmt.format(s.high)}{unit}" if s is not None and s.known else ""


def with_interval(s: Optional[Spread], fmt: str = "{:.2f}", unit: str = "×") -> str:
    """'0.94× (0.81–1.09)': the median, then the 95% interval in brackets."""
    if s is None:
        return ""
    inside = interval_text(s, fmt, "")
    return f"{fmt.format(s.median)}{unit}" + (f" ({inside})" if inside else "")


def _error_text(row: dict) -> str:
    error, ratio = row.get("prediction_error"), row.get("prediction_ratio")
    if error is None:
        return ""
    spread = f" ({(ratio.low - 1) * 100:+.0f}…{(ratio.high - 1) * 100:+.0f})" if ratio is not None and ratio.known else ""
    # the interval of the per-round errors (prediction ÷ measurement, round by round)
    return f"{error:+.0%}{spread}"


def _percent_text(s: Optional[Spread]) -> str:
    """'44% (40–48)'."""
    if s is None:
        return ""
    return f"{s.median:.0%}" + (f" ({s.low * 100:.0f}–{s.high * 100:.0f})" if s.known else "")


def _speed_cells(row: dict) -> list[str]:
    cells = [row["label"], f"{row['world_size']}×{row['threads_per_process']}", str(row["global_batch_size"]),
             with_interval(row["samples_per_s"], "{:,.0f}", "")]
    if row.get("reference"):
        cells += ["1 (reference)", ""]
    else:
        cells += [with_interval(row.get("speedup")), _percent_text(row.get("efficiency"))]
    versus = "" if row["baseline"] else with_interval(row.get("speedup_vs_threads_only"))
    predicted = "" if row.get("reference") else with_interval(row.get("predicted_speedup"))
    return cells + [versus, predicted, "" if row.get("reference") else _error_text(row)]


def _memory_text(s: Optional[Spread]) -> str:
    """'438 MB (431–446)': the largest process's training peak, median over rounds."""
    if s is None:
        return ""
    return f"{s.median / 1e6:,.0f} MB" + (f" ({s.low / 1e6:,.0f}–{s.high / 1e6:,.0f})" if s.known else "")


def _part_cells(row: dict, accuracy: bool) -> list[str]:
    cells = [row["label"], *(ms_text(row.get(key)) for key in _PART_COLUMNS), _memory_text(row.get("peak_memory_bytes"))]
    if accuracy:
        acc = row.get("eval_accuracy")
        half = _half(acc)
        cells += [f"{row['lr']:.2g} ({row['lr_scaling']})",
                  "" if acc is None else f"{acc.median:.3f}" + (f"±{half:.3f}" if half is not None else "")]
    return cells


def _part_columns(accuracy: bool) -> list[str]:
    return ["configuration", *_PART_COLUMNS.values(), "peak memory", *(["lr (rule)", "held-out acc"] if accuracy else [])]


def _tables(rows: list[dict], accuracy: bool) -> list[tuple[str, list[str], list[list[str]]]]:
    return [("speed (median over rounds, 95% interval in brackets)", _SPEED_COLUMNS, [_speed_cells(r) for r in rows]),
            ("time per step (median ± half the 95% interval)", _part_columns(accuracy),
             [_part_cells(r, accuracy) for r in rows])]


def print_table(rows: list[dict], title: str, accuracy: bool) -> None:
    console = table_console()
    for caption, head, body in _tables(rows, accuracy):
        table = Table(title=f"{title}: {caption}", title_justify="left")
        for column in head:
            table.add_column(column, justify="left" if column == "configuration" else "right")
        for cells in body:
            table.add_row(*cells)
        console.print(table)


def markdown(rows: list[dict], title: str, accuracy: bool, closing: list[str]) -> str:
    lines = [f"**{title}**", ""]
    for caption, head, body in _tables(rows, accuracy):
        lines += [f"*{caption}*", "", "| " + " | ".join(head) + " |",
                  "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in body] + [""]
    return "\n".join([*lines, *closing]) + "\n"


def prediction_lines(rows: list[dict]) -> list[str]:
    """The plan checked against the measurement, one line per distributed configuration."""
    lines = []
    for row in rows:
        predicted, measured = row.get("predicted_speedup"), row.get("speedup")
        if row["world_size"] < 2 or predicted is None or measured is None:
            continue
        comm = row.get("predicted_exposed_comm_s")
        lines.append(f"plan for {row['label']}: {predicted.median:.2f}× predicted ({interval_text(predicted) or 'one round'})"
                     f" against {measured.median:.2f}× measured: error {row['prediction_error']:+.0%}"
                     + (f"; communication {comm.median * 1e3:.1f} ms predicted, "
                        f"{row['exposed_comm_s'].median * 1e3:.1f} ms exposed in the measurement"
                        if comm is not None and row.get("exposed_comm_s") is not None else ""))
    return lines


def write_outputs(out: Path, document: dict, rows: list[dict], title: str, accuracy: bool,
                  closing: list[str]) -> list[Path]:
    write_json_atomic(out / JSON_FILE, document)
    (out / MARKDOWN_FILE).write_text(markdown(rows, title, accuracy, closing))
    return [out / JSON_FILE, out / MARKDOWN_FILE]
