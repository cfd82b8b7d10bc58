"""Gradient compression (--grad-compression) at world size 2: gradients close to exact fp32
all-reduce, and training digits-mlp reaches close held-out accuracy."""

import json
from pathlib import Path

from .helpers import torchrun

WORKER = Path(__file__).with_name("perf_compression_worker.py")


def test_compressed_gradients_are_close_and_train_as_well():
    result = torchrun(WORKER, "bf16,fp16,powersgd", "6", nproc=2, timeout=240, check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    errors, accuracy = report["grad_error"], report["accuracy"]
    # The hook ran (results differ from fp32), and its error is the cast's rounding:
    # bf16 keeps 8 significant bits, fp16 11.
    assert 0 < errors["bf16"] < 2 ** -7, errors
    assert 0 < errors["fp16"] < 2 ** -10, errors
    assert accuracy["none"] > 0.9, accuracy
    assert abs(accuracy["bf16"] - accuracy["none"]) <= 0.01, accuracy
    assert abs(accuracy["fp16"] - accuracy["none"]) <= 0.01, accuracy
    assert abs(accuracy["powersgd"] - accuracy["none"]) <= 0.03, accuracy
