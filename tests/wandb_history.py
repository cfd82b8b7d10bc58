"""Reads an offline W&B run's history back with wandb's own record classes.

An offline run keeps everything in OUT/wandb/offline-run-*/run-*.wandb: a 7-byte header
(":W&B", a magic number, a version), then wandb's protobuf `Record`s framed like a LevelDB
log (32 KiB blocks; each chunk: CRC32, length, type; FULL, or FIRST/MIDDLE/LAST pieces).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    from wandb.proto import wandb_internal_pb2

    raw = Path(path).read_bytes()
    assert raw[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the rest of a block too short for a chunk header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + HEADER])
        if kind == 0 and length == 0:
            pos += left
            continue
        pending += raw[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def history(path: Path) -> list[dict]:
    """Each `run.log` call's values, by key, with W&B's own `_step`."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def config(path: Path) -> dict:
    values = {}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        items = record.config.update if kind == "config" else record.run.config.update if kind == "run" else []
        for item in items:
            values[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return values
