"""The Python standard library's own source, as bytes: real text that is on every machine
that runs Python, so a language model can be trained here with nothing downloaded.

The files are read in a fixed order (sorted paths of a fixed set of modules) and cut into
windows of `context + 1` bytes: the inputs are a window's first `context` bytes and the
targets the same bytes shifted by one (the next byte at every position). Every 10th window
is held out. Which modules, and so the exact text, depends on the Python version; within
one version it is the same on every machine.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

CONTEXT = 64  # bytes a model sees at once
TRAIN_BYTES = 480_000  # about 7,400 windows: one epoch learns well below the unigram baseline
HELD_OUT_EVERY = 10
# Large, plain modules present in every CPython since 3.10.
MODULES = ("argparse.py", "dataclasses.py", "typing.py", "inspect.py", "subprocess.py", "pathlib.py",
           "tarfile.py", "zipfile.py", "logging/__init__.py", "email/message.py", "http/client.py",
           "json/encoder.py", "unittest/case.py", "difflib.py", "pydoc.py", "configparser.py")


def stdlib_bytes(limit: int = TRAIN_BYTES * 11 // 10) -> bytes:
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for name in MODULES:
        path = root / name
        if not path.exists():
            continue
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= limit:
            break
    text = b"\n".join(chunks)[:limit]
    if len(text) < 10 * (CONTEXT + 1) * HELD_OUT_EVERY:
        raise RuntimeError(f"found only {len(text)} bytes of the standard library's source under {root}")
    return text


def stdlib_text_datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """(train, held_out) windows of (inputs, next-byte targets), both int64 of shape (CONTEXT,).
    The split is fixed (every 10th window), so `seed` does not change it."""
    data = torch.frombuffer(bytearray(stdlib_bytes()), dtype=torch.uint8).to(torch.int64)
    windows = data[: (len(data) - 1) // CONTEXT * CONTEXT + 1]
    starts = torch.arange(0, len(windows) - CONTEXT, CONTEXT)
    inputs = torch.stack([windows[s:s + CONTEXT] for s in starts])
    targets = torch.stack([windows[s + 1:s + CONTEXT + 1] for s in starts])
    held = torch.arange(len(starts)) % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    return TensorDataset(inputs[~held], targets[~held]), TensorDataset(inputs[held], targets[held])


def unigram_loss(dataset: TensorDataset, reference: TensorDataset) -> float:
    """Cross-entropy (nats per byte) on `dataset` of always predicting `reference`'s byte
    frequencies: the bar a model that learned anything about order must clear."""
    counts = torch.bincount(reference.tensors[1].flatten(), minlength=256).double() + 1.0
    log_p = (counts / counts.sum()).log()
    return -log_p[dataset.tensors[1].flatten()].mean().item()
