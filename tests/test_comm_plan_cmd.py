"""`scaletrain comm` (its own 2-process job) and `scaletrain plan` reading its result, end to
end; no timing assertions (the machine is shared), only sane and consistent figures."""

import json

import pytest

from scaletrain.comm.bandwidth import OPS, bus_factor
from scaletrain.comm.report import print_table, result_document

from .helpers import scaletrain


@pytest.fixture(scope="module")
def comm_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("comm") / "comm.json"
    result = scaletrain("comm", "--sizes", "4K,256K", "--iters", "3", "--warmup", "1", "--json", "--out", str(out),
                        timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(out.read_text())
    return out


def test_comm_json_has_every_collective_and_consistent_bandwidths(comm_json):
    doc = json.loads(comm_json.read_text())
    assert doc["world_size"] == 2 and doc["backend"] == "gloo" and doc["device"] == "cpu"
    rows = doc["results"]
    assert [(r["op"], r["bytes"]) for r in rows] == [(op, size) for op in OPS for size in (4096, 262144)]
    for row in rows:
        assert row["seconds"] > 0 and 1 <= row["iters"] <= 3 and row["world_size"] == 2
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(row["op"], 2))


def test_comm_table_shows_sizes_and_bandwidths(comm_json, capsys):
    doc = json.loads(comm_json.read_text())
    print_table(result_document(doc["results"], doc["backend"], doc["device"], doc["world_size"]))
    shown = capsys.readouterr().out
    assert "busbw GB/s" in shown and "256K" in shown and "reduce_scatter" in shown


def test_plan_predicts_every_strategy_and_size_and_what_fits(comm_json):
    result = scaletrain("plan", "--workload", "digits-mlp", "--steps", "3", "--warmup", "1", "--probe-rounds", "1",
                        "--comm",
                        str(comm_json), "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    probe = doc["probe"]
    assert probe["footprint"]["grad_bytes"] == 4 * (64 * 256 + 256 + 2 * (256 * 256 + 256) + 256 * 10 + 10)
    assert probe["link"]["source"] == str(comm_json) and probe["link"]["busbw"] > 0
    got = {(p["strategy"], p["world_size"]) for p in doc["predictions"]}
    assert {("ddp", n) for n in (1, 2, 8, 16, 64)} <= got
    assert {("fsdp", n) for n in (1, 2, 8, 16, 64)} <= got
    assert ("pipeline", 2) in got and ("pipeline", 8) not in got  # 4 blocks: at most 4 stages
    ddp2 = next(p for p in doc["predictions"] if p["strategy"] == "ddp" and p["world_size"] == 2)
    assert ddp2["global_batch"] == 64 and ddp2["comm_s"] > 0
    # on this machine's 2 processes, the communication of the probe's real DDP steps
    measured = probe["ddp_step"]
    assert measured["world_size"] == 2 and measured["step_s"] > 0 and measured["local_step_s"] > 0
    assert ddp2["exposed_comm_s"] == pytest.approx(max(0.0, measured["step_s"] - measured["local_step_s"]))
    assert ddp2["step_s"] == pytest.approx(max(measured["step_s"], measured["local_step_s"]))
    assert ddp2["efficiency"] == pytest.approx(ddp2["speedup"] / 2)
    # FSDP's own cost is measured on one process under fully_shard; fsdp on one process (one
    # shard, no replica) trains the model as it is, so it is predicted as one plain process.
    ddp1, fsdp1 = (next(p for p in doc["predictions"] if (p["strategy"], p["world_size"]) == (s, 1))
                   for s in ("ddp", "fsdp"))
    assert probe["fsdp_overhead_s"] > 0
    assert fsdp1["step_s"] == pytest.approx(ddp1["step_s"], rel=0.05)
    # And FSDP's own peak, in a fresh process of the job of 2: what FSDP's predictions rest on.
    assert probe["fsdp_peak_world_size"] == 2 and probe["fsdp_peak_above_bytes"] > 0
    fsdp2 = next(p for p in doc["predictions"] if (p["strategy"], p["world_size"]) == ("fsdp", 2))
    assert fsdp2["memory_bytes"] >= probe["memory_constant_bytes"] + probe["fsdp_peak_above_bytes"] - 1
    # Sharding lowers what a process holds: fsdp over 64 below fsdp over 2. (Not below one
    # plain process — nor fsdp on one, which trains the model as it is — on this 0.3 MB model:
    # FSDP's own buffers, measured in its steps, outweigh the states it shards; the verdict on
    # a model that does not fit one device is tested on a hand-made probe in
    # test_measure_formulas.)
    fsdp64 = next(p for p in doc["predictions"] if (p["strategy"], p["world_size"]) == ("fsdp", 64))
    assert fsdp64["memory_bytes"] < fsdp2["memory_bytes"] and probe["memory_constant_bytes"] > 0


def test_sigterm_during_plan_is_143_in_one_line(tmp_path):
    """A scheduler's SIGTERM to `scaletrain plan` while its first probe job runs."""
    import os
    import signal
    import sys
    import time

    from .launch_helpers import finish_marked, marked, start_marked

    proc, token = start_marked([sys.executable, "-m", "scaletrain", "plan", "--workload", "digits-mlp",
                                "--world-sizes", "1,2", "--probe-rounds", "2"])
    deadline = time.monotonic() + 120
    while len(marked(token)) < 3:  # the plan and its probe job's ranks
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    result, left = finish_marked(proc, token, timeout=60)
    assert result.returncode == 143 and not left, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "plan stopped by SIGTERM before its first probe round" in lines[0], result.stderr
