"""`scaletrain train --strategy auto` and `scaletrain plan --choose`: a short measurement, every
configuration predicted, the fastest that fits trained — and the measurement cached per model,
batch, world and machine, so the next choice is made at once."""

from __future__ import annotations

import json

import pytest

from tests.helpers import scaletrain, test_env


@pytest.mark.timeout(400)
def test_auto_chooses_trains_and_remembers(tmp_path):
    env = test_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    out = tmp_path / "auto"
    first = scaletrain("train", "--strategy", "auto", "--workload", "digits-mlp", "--nproc-per-node", "2",
                       "--max-steps", "10", "--out", str(out), env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "measuring" in first.stdout and "Chosen: " in first.stdout and "Runner-up: " in first.stdout
    summary = json.loads((out / "summary.json").read_text())
    chosen = summary["strategy"]
    assert chosen in ("ddp", "fsdp", "pipeline") and summary["auto_choice"].startswith("Chosen: ")
    assert summary["optimizer_steps"] == 10 and summary["world_size"] == 2
    recorded = (out / "config.yaml").read_text()
    assert f"strategy: {chosen}" in recorded and "strategy: auto" not in recorded  # repeats the choice exactly
    # The same model, batch, world and machine: the choice is made from the cache, at once.
    again = scaletrain("plan", "--choose", "--workload", "digits-mlp", "--world-sizes", "2", "--nproc-per-node", "2",
                       "--json", env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["chosen"]["strategy"] and doc["considered"] >= 4 and len(doc["candidates"]) >= 4
    assert doc["flags"][:2] == ["--strategy", doc["chosen"]["strategy"]]
    tight = scaletrain("plan", "--choose", "--workload", "digits-mlp", "--world-sizes", "2", "--nproc-per-node", "2",
                       "--device-memory-gb", "0.001", env=env, timeout=60)
    assert tight.returncode == 1 and "fits the memory" in tight.stdout  # nothing fits 1 MB: said, not chosen


def test_auto_on_several_nodes_without_hosts_is_refused_in_one_line(tmp_path):
    # torchrun's nodes each run the command: each would choose on its own, perhaps apart
    done = scaletrain("train", "--strategy", "auto", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint",
                      "127.0.0.1:29555", "--workload", "digits-mlp", "--out", str(tmp_path / "run"), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [line for line in done.stderr.strip().splitlines()
                                                if line.startswith("scaletrain: error: --strategy auto with --nnodes 2")]
    assert "--hosts" in done.stderr and not (tmp_path / "run").exists()
