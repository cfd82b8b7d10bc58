"""A checksum per checkpoint file, written before the completion marker and verified
before anything is loaded: a checkpoint whose bytes changed on disk (a bad sector, a
stray write, a copy cut short) is refused by name instead of training on garbage.

CRC-32 (zlib): it detects the random damage this is for at memory speed; it is not a
defence against someone forging a file, which the restricted unpicklers are for."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Iterable, Optional

CHECKSUM_FILE = "checksums.json"
_CHUNK = 4 * 1024 * 1024


def file_checksum(path: Path) -> dict:
    crc, size = 0, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return {"crc32": f"{crc:08x}", "bytes": size}


def checksums(folder: Path, relative_paths: Iterable[str]) -> dict[str, dict]:
    return {rel: file_checksum(folder / rel) for rel in relative_paths}


def verify(folder: Path) -> Optional[str]:
    """None when every file listed matches its checksum, else what is wrong (one phrase)."""
    listing = folder / CHECKSUM_FILE
    try:
        expected = json.loads(listing.read_text())
    except FileNotFoundError:
        return f"it has no {CHECKSUM_FILE}"
    except (OSError, ValueError, UnicodeDecodeError):
        return f"its {CHECKSUM_FILE} is unreadable"
    if not isinstance(expected, dict) or not expected:
        return f"its {CHECKSUM_FILE} lists no files"
    for rel, want in sorted(expected.items()):
        path = folder / rel
        if not path.is_file():
            return f"{rel} is missing"
        try:
            got = file_checksum(path)
        except OSError as exc:
            return f"{rel} cannot be read ({exc.strerror})"
        if got != want:
            what = "is truncated or grown" if got["bytes"] != want.get("bytes") else "does not match its checksum"
            return f"{rel} {what} (corrupted on disk)"
    return None
