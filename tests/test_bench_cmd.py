"""`scaletrain bench` end to end at world sizes 1 and 2, with tiny step counts."""

import json

from .helpers import scaletrain

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_bench_writes_table_json_markdown_and_plots_with_predictions(tmp_path):
    out = tmp_path / "bench"
    result = scaletrain("bench", "--workload", "digits-mlp", "--nproc", "1,2", "--steps", "4", "--warmup", "1",
                        "--probe-rounds", "1", "--out", str(out), timeout=240)  # with the quick all_reduce probe
    assert result.returncode == 0, result.stderr
    doc = json.loads((out / "bench.json").read_text())
    rows = {r["label"]: r for r in doc["configurations"]}
    assert list(rows) == ["threads-only ×1", "ddp ×1", "ddp ×2"]
    base, two = rows["threads-only ×1"], rows["ddp ×2"]
    assert base["baseline"] and base["speedup"] == 1.0 and base["threads_per_process"] == doc["cores"]
    assert two["nproc"] == 2 and two["global_batch_size"] == 64
    assert two["threads_per_process"] == max(1, doc["cores"] // 2)
    assert two["efficiency"] == two["speedup"] / 2
    assert two["samples_per_s"] == two["samples_per_s_rounds"][0]
    for part in ("compute_s", "exposed_comm_s", "data_s", "optimizer_s", "idle_s"):
        assert two[part] >= 0
    assert two["compute_s"] > 0 and two["step_s"] >= two["compute_s"]
    assert two["predicted_speedup"] > 0 and "predicted_speedup" not in base
    assert "| ddp ×2 |" in (out / "bench.md").read_text()
    for name in ("speedup.png", "breakdown.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert "ddp ×2" in result.stdout and "samples/s" in result.stdout


def test_bench_accuracy_reports_held_out_accuracy_per_learning_rate_rule(tmp_path):
    out = tmp_path / "acc"
    result = scaletrain("bench", "--accuracy", "--workload", "digits-mlp", "--epochs", "1", "--nproc", "2",
                        "--no-predict", "--lr-scaling", "linear", "--out", str(out), timeout=240)
    assert result.returncode == 0, result.stderr
    rows = {r["label"]: r for r in json.loads((out / "bench.json").read_text())["configurations"]}
    assert list(rows) == ["threads-only ×1", "ddp ×2, lr linear"]
    assert rows["ddp ×2, lr linear"]["lr"] == 2 * rows["threads-only ×1"]["lr"]
    assert rows["ddp ×2, lr linear"]["lr_factor"] == 2.0 and rows["ddp ×2, lr linear"]["lr_warmup_steps"] > 0
    for row in rows.values():
        assert 0.0 <= row["eval_accuracy"] <= 1.0
    assert rows["threads-only ×1"]["eval_accuracy"] > 0.5  # one epoch of digits is learnt well past chance
