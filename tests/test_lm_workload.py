"""The built-in language model (a byte-level GPT on the standard library's source) under
ddp, fsdp, pipeline and tensor parallel through the trainer: it learns (held-out loss well below the unigram
baseline) and reports held-out loss and perplexity, and its model FLOPs per sample are one
process's under every strategy, context parallel's included (MFU comparable across them); the GPT-2 example script from the
README runs as one process and under `scaletrain launch` with fsdp; fp16 (with the gradient
scaler) and bf16 under fsdp (through its mixed-precision policy) learn digits as fp32 does."""

from __future__ import annotations

import json
import math
import sys

import pytest

from scaletrain.workloads.text import stdlib_text_datasets, unigram_loss
from tests.helpers import REPO, run, scaletrain


@pytest.fixture(scope="module")
def unigram() -> float:
    train, held_out = stdlib_text_datasets(0)
    return unigram_loss(held_out, train)


@pytest.fixture(scope="module")
def one_process_flops(tmp_path_factory) -> float:
    """The model FLOPs of one sample, as one process counts them."""
    from scaletrain.train.config import TrainConfig
    from scaletrain.train.loop import train

    summary = train(TrainConfig(strategy="single", workload="stdlib-gpt", max_steps=2, pin_cores=False),
                    tmp_path_factory.mktemp("single") / "run")
    return summary["model_flops_per_step"] / summary["global_batch_size"]


def _flops_per_sample(summary: dict) -> float:
    return summary["model_flops_per_step"] / summary["global_batch_size"]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "pipeline", "tp"])
def test_the_language_model_learns_under_each_strategy(tmp_path, strategy, unigram, one_process_flops):
    """tp: tensor parallel alone leaves the embeddings and norms plain tensors beside its
    DTensors, under the trainer's fused Adam; its peers' output head (outside its plan),
    computed alike by both, counts once."""
    saves = ["--checkpoint-every", "100000"] if strategy == "ddp" else []  # ddp: one checkpoint, at the end
    # 60 of the epoch's 117 steps: the held-out loss is then about 2.33 (2.20 after the epoch),
    # against 0.8 × the unigram's 3.06 = 2.45; every held-out window is still evaluated
    done = scaletrain("train", "--workload", "stdlib-gpt", "--strategy", strategy, "--nproc-per-node", "2",
                      "--max-steps", "60", *saves, "--out", str(tmp_path / "run"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert _flops_per_sample(summary) == pytest.approx(one_process_flops, rel=0.005), strategy
    assert summary["task"] == "lm"
    assert summary["final_loss"] < 0.8 * unigram, (summary["final_loss"], unigram)
    assert summary["final_perplexity"] == pytest.approx(math.exp(summary["final_loss"]), rel=1e-6)
    assert summary["eval_samples"] == len(stdlib_text_datasets(0)[1])  # every held-out window once
    assert "held-out perplexity" in done.stdout
    if saves:  # resumed with another --seq-len: that is what is named, once, not --batch-size
        refused = scaletrain("train", "--workload", "stdlib-gpt", "--seq-len", "32", "--nproc-per-node", "2",
                             "--resume", str(tmp_path / "run"), "--out", str(tmp_path / "again"), timeout=120)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-3000:]
        assert "written with --seq-len 64 but this run has --seq-len 32" in lines[0] and "--batch-size" not in lines[0]


def test_context_parallels_flops_are_one_processs(tmp_path, one_process_flops):
    """The ring attends in blocks (the causal ones skipped): counted as the whole attention."""
    done = scaletrain("train", "--workload", "stdlib-gpt", "--strategy", "fsdp", "--cp", "2", "--nproc-per-node", "2",
                      "--max-steps", "2", "--out", str(tmp_path / "run"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert _flops_per_sample(summary) == pytest.approx(one_process_flops, rel=0.005)


@pytest.mark.parametrize("how", ["one process", "launch fsdp"])
def test_the_gpt2_example_learns(how):
    script = str(REPO / "examples" / "train_gpt2.py")
    argv = ([sys.executable, script, "--steps", "40"] if how == "one process" else
            [sys.executable, "-m", "scaletrain", "launch", "--nproc-per-node", "2", script, "--strategy", "fsdp",
             "--steps", "40"])
    done = run(argv, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(l for l in done.stdout.splitlines() if "training loss" in l)
    first, last = (float(x) for x in line.split("training loss ")[1].split(";")[0].split(" → "))
    assert last < first - 1.0, line


@pytest.mark.parametrize("argv", [["--strategy", "single", "--workload", "digits-mlp", "--epochs", "5"],
                                  ["--strategy", "fsdp", "--nproc-per-node", "2"]])
def test_half_precision_learns_digits_like_fp32(tmp_path, argv):
    """fp16 (CPU kernels are slow in fp16: the MLP) under single; bf16 under fsdp."""
    half = "fp16" if "single" in argv else "bf16"
    accuracy = {}
    for precision in ("fp32", half):
        done = scaletrain("train", *argv, "--precision", precision, "--out", str(tmp_path / precision), timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads((tmp_path / precision / "summary.json").read_text())
        assert summary["precision"] == precision
        # the CPU's peak: the faster of float32's matrix multiply and the half precision's
        assert 0 < summary["mfu"] <= 1 and ("float32" in summary["peak_source"]), summary
        accuracy[precision] = summary["final_accuracy"]
    assert accuracy[half] > 0.9 and abs(accuracy[half] - accuracy["fp32"]) < 0.03, accuracy
