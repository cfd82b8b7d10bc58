"""The Python standard library's own source, as bytes: real text that is on every machine
that runs Python, so a language model can be trained here with nothing downloaded.

The files are read in a fixed order (sorted paths of a fixed set of modules) and cut into
windows of `context + 1` bytes (`--seq-len`, default 64): the inputs are a window's first
`context` bytes and the targets the same bytes shifted by one (the next byte at every
position). Every 10th window is held out. Long windows take more of the text: at least 20
windows of any length (up to MAX_SEQ_LEN). Which modules, and so the exact text, depends on the Python version; within
one version it is the same on every machine.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from ..foundation.errors import UsageError, arg

CONTEXT = 64  # bytes a model sees at once
TRAIN_BYTES = 480_000  # about 7,400 windows: one epoch learns well below the unigram baseline
HELD_OUT_EVERY = 10
MIN_WINDOWS = 2 * HELD_OUT_EVERY  # two held out
MAX_SEQ_LEN = 32_768  # 20 windows of it fit the modules below in every CPython since 3.10
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
    if len(text) < limit * 10 // 11:
        raise RuntimeError(f"found only {len(text)} bytes of the standard library's source under {root}")
    return text


def check_seq_len(seq_len: int) -> None:
    if not 1 <= seq_len <= MAX_SEQ_LEN:
        raise UsageError(f"{arg('seq_len', seq_len)}: the standard library's source makes sequences of 1 to "
                         f"{MAX_SEQ_LEN} bytes (at least {MIN_WINDOWS} of them); use {arg('seq_len', MAX_SEQ_LEN)} or "
                         f"less")


def stdlib_text_datasets(seed: int, context: int = CONTEXT) -> tuple[TensorDataset, TensorDataset]:
    """(train, held_out) windows of (inputs, next-byte targets), both int64 of shape (context,).
    The split is fixed (every 10th window), so `seed` does not change it."""
    check_seq_len(context)
    limit = max(TRAIN_BYTES, MIN_WINDOWS * (context + 1)) * 11 // 10
    data = torch.frombuffer(bytearray(stdlib_bytes(limit)), dtype=torch.uint8).to(torch.int64)
    windows = data[: (len(data) - 1) // context * context + 1]
    starts = torch.arange(0, len(windows) - context, context)
    inputs = torch.stack([windows[s:s + context] for s in starts])
    targets = torch.stack([windows[s + 1:s + context + 1] for s in starts])
    held = torch.arange(len(starts)) % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    return TensorDataset(inputs[~held], targets[~held]), TensorDataset(inputs[held], targets[held])


def unigram_loss(dataset: TensorDataset, reference: TensorDataset) -> float:
    """Cross-entropy (nats per byte) on `dataset` of always predicting `reference`'s byte
    frequencies: the bar a model that learned anything about order must clear."""
    counts = torch.bincount(reference.tensors[1].flatten(), minlength=256).double() + 1.0
    log_p = (counts / counts.sum()).log()
    return -log_p[dataset.tensors[1].flatten()].mean().item()
