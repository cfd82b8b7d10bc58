"""`scaletrain bench` end to end at world sizes 1 and 2, with tiny step counts and two rounds."""

import json

from .helpers import scaletrain

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_bench_rounds_give_intervals_a_verdict_and_the_plan_checked(tmp_path):
    out = tmp_path / "bench"
    result = scaletrain("bench", "--workload", "digits-mlp", "--world-sizes", "2", "--steps", "4", "--warmup", "1",
                        "--strategy", "ddp,pipeline", "--microbatches", "8",
                        "--min-seconds", "0.2", "--rounds", "2", "--out", str(out),
                        "--max-other-load", "2", timeout=300)  # 2 cores: no round left out (see test_measure_rounds)
    assert result.returncode == 0, result.stderr
    doc = json.loads((out / "bench.json").read_text())
    rows = {r["label"]: r for r in doc["configurations"]}
    assert list(rows) == ["threads-only ×1", "ddp ×1", "ddp ×2", "pipeline ×1", "pipeline ×2"]  # one process too
    # The strategy's options reach the processes that measure it, and bench.json says what ran.
    for label in ("pipeline ×1", "pipeline ×2"):
        assert rows[label]["options"] == {"microbatches": 8} and rows[label]["microbatches"] == 8, rows[label]
    assert rows["pipeline ×2"]["mesh"] == "pp 2" and rows["ddp ×2"]["options"] == {}
    base, one, two = rows["threads-only ×1"], rows["ddp ×1"], rows["ddp ×2"]
    assert doc["reference"] in ("ddp ×1",) and one["reference"] and not base["reference"]
    assert base["baseline"] and base["threads_per_process"] == doc["cores"]
    assert two["world_size"] == 2 and two["global_batch_size"] == 64 and two["rounds"] == 2
    assert two["threads_per_process"] == max(1, doc["cores"] // 2)
    # every figure: median, 95% interval, rounds and the per-round values
    rate = two["samples_per_s"]
    assert rate["rounds"] == 2 and len(rate["values"]) == 2 and rate["low"] <= rate["median"] <= rate["high"]
    ratios = [a / b for a, b in zip(rate["values"], one["samples_per_s"]["values"])]
    assert two["speedup"]["values"] == ratios  # paired round by round with the reference
    assert two["efficiency"]["median"] == two["speedup"]["median"] / 2
    for part in ("compute_s", "exposed_comm_s", "data_s", "optimizer_s", "idle_s"):
        assert two[part]["median"] >= 0 and two[part]["low"] is not None
    # the plan's prediction from each round's own measurements, and its error
    assert len(doc["probes"]) == 2 and two["predicted_speedup"]["rounds"] == 2
    error = two["predicted_speedup"]["median"] / two["speedup"]["median"] - 1
    assert abs(two["prediction_error"] - error) < 1e-9
    assert two["predicted_exposed_comm_s"]["median"] > 0 and "predicted_speedup" in one
    assert doc["verdict"]["kind"] in ("worth it", "not worth it", "cannot tell")
    assert doc["verdict"]["sentence"] in result.stdout and "Measured 2 round(s): as many as asked (--rounds)." in result.stdout
    assert "| ddp ×2 |" in (out / "bench.md").read_text() and "plan for ddp ×2" in result.stdout
    for name in ("speedup.png", "breakdown.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert "95% interval" in result.stdout and "samples/s" in result.stdout


def test_bench_accuracy_reports_held_out_accuracy_per_learning_rate_rule(tmp_path):
    out = tmp_path / "acc"
    result = scaletrain("bench", "--accuracy", "--workload", "digits-mlp", "--epochs", "1", "--world-sizes", "2",
                        "--no-predict", "--lr-scaling", "linear", "--rounds", "1", "--out", str(out), "--max-other-load", "2",
                        timeout=240)
    assert result.returncode == 0, result.stderr
    doc = json.loads((out / "bench.json").read_text())
    rows = {r["label"]: r for r in doc["configurations"]}
    assert list(rows) == ["threads-only ×1", "ddp ×1", "ddp ×2, lr linear"]
    assert rows["ddp ×2, lr linear"]["lr"] == 2 * rows["threads-only ×1"]["lr"]
    assert rows["ddp ×2, lr linear"]["lr_factor"] == 2.0 and rows["ddp ×2, lr linear"]["lr_warmup_steps"] > 0
    for row in rows.values():
        assert 0.0 <= row["eval_accuracy"]["median"] <= 1.0
    assert rows["threads-only ×1"]["eval_accuracy"]["median"] > 0.5  # one epoch of digits is learnt well past chance
    assert doc["verdict"]["kind"] == "cannot tell"  # one round: no interval to decide with
    assert (out / "accuracy.png").read_bytes()[:8] == PNG_MAGIC


def _start(*args: str):
    import sys

    from .launch_helpers import start_marked

    return start_marked([sys.executable, "-m", "scaletrain", *args])


def _wait_for(proc, words: str, seconds: float) -> str:
    """The output up to the line holding `words`."""
    import time

    deadline = time.monotonic() + seconds
    read = []
    while not read or words not in read[-1]:
        read.append(proc.stdout.readline())
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
    return "".join(read)


def test_ctrl_c_during_bench_is_130_one_line_and_keeps_the_rounds_measured(tmp_path):
    """Ctrl-C in round 2: the finished round is reported and written; the run says so once.
    Also: a budget shorter than a round is said, not silently overrun."""
    import os
    import signal
    import time

    from .launch_helpers import finish_marked

    out = tmp_path / "bench"
    proc, token = _start("bench", "--workload", "digits-mlp", "--nproc", "1,2", "--steps", "3", "--warmup", "1",
                         "--min-seconds", "0.1", "--no-predict", "--budget", "1", "--max-other-load", "2",
                         "--out", str(out))
    before = _wait_for(proc, "round 2:", 200)
    # Into the next configuration's job (each takes seconds), not the moment between two jobs:
    # once, in a full suite, a Ctrl-C sent as the line appeared was not seen.
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    result, left = finish_marked(proc, token, timeout=120)
    assert result.returncode == 130 and not left, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    ours = [line for line in result.stderr.splitlines() if line.startswith("scaletrain")]
    assert len(ours) == 1 and "bench stopped by SIGINT after 1 round(s)" in ours[0], result.stderr[-3000:]
    doc = json.loads((out / "bench.json").read_text())
    assert doc["stop_reason"] == "stopped by SIGINT" and {r["rounds"] for r in doc["configurations"]} == {1}
    assert "note: round 1 took" in before and "past the 1 s budget" in before, before
