"""End to end: `scaletrain train --strategy X` on the real digits data learns (held-out
accuracy ≥ 0.93) and summary.json records what is particular to the strategy. Every other
strategy was checked by hand at the default epochs (docs/strategies.md); these two cover
a multi-process (pipeline) and a one-process split (mp) run, kept short."""

from __future__ import annotations

import json

from tests.helpers import scaletrain


def summary_of(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_pipeline_1f1b_learns_digits_and_describes_itself(tmp_path):
    out = tmp_path / "pipeline"
    done = scaletrain("train", "--strategy", "pipeline", "--nproc-per-node", "2", "--schedule", "1f1b",
                      "--microbatches", "4", "--epochs", "2", "--out", str(out), timeout=240)
    assert done.returncode == 0, done.stderr
    s = summary_of(out)
    assert s["final_accuracy"] >= 0.93, s
    assert (s["strategy"], s["pipeline_stages"], s["pipeline_replicas"], s["schedule"], s["microbatches"]) == \
        ("pipeline", 2, 1, "1f1b", 4)
    assert [b for stage in s["stages"] for b in stage] == ["conv1", "conv2", "fc1", "fc2"]
    assert s["eval_samples"] == 360
    per_process = s["memory_per_process"]
    assert [m["rank"] for m in per_process] == [0, 1]
    # Each stage holds only its own blocks' parameters, which add up to the whole model.
    assert sum(m["parameters_bytes"] for m in per_process) == 4 * sum(s["stage_parameters"])


def test_mp_with_microbatches_learns_digits_and_describes_itself(tmp_path):
    out = tmp_path / "mp"
    done = scaletrain("train", "--strategy", "mp", "--devices-per-process", "2", "--microbatches", "4",
                      "--epochs", "2", "--out", str(out), timeout=240)
    assert done.returncode == 0, done.stderr
    s = summary_of(out)
    assert s["final_accuracy"] >= 0.93, s
    assert (s["devices_per_process"], s["microbatches"], s["part_devices"]) == (2, 4, ["cpu", "cpu"])
    assert s["precision"] == "fp32" and s["grad_accum"] == 1
