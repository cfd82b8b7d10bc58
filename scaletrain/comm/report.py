"""What `scaletrain comm` prints and writes."""

from __future__ import annotations

import json

from ..measure.console import table_console
from rich.table import Table

from .bandwidth import human_bytes


def result_document(rows: list[dict], backend: str, device: str, world_size: int) -> dict:
    return {"backend": backend, "device": device, "world_size": world_size, "results": rows}


def print_table(doc: dict) -> None:
    table = Table(title=f"collectives: {doc['world_size']} processes, {doc['backend']} on {doc['device']}",
                  title_justify="left")
    for column in ("op", "size", "time", "algbw GB/s", "busbw GB/s"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for row in doc["results"]:
        micros = row["seconds"] * 1e6
        time_text = f"{micros:,.0f} µs" if micros < 10_000 else f"{micros / 1000:,.1f} ms"
        table.add_row(row["op"], human_bytes(row["bytes"]), time_text, f"{row['algbw_gbps']:.3f}",
                      f"{row['busbw_gbps']:.3f}")
    table_console().print(table)


def print_json(doc: dict) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True), flush=True)
