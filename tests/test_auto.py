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
    assert chosen in ("single", "ddp", "fsdp", "pipeline") and summary["auto_choice"].startswith("Chosen: ")
    assert summary["optimizer_steps"] == 10
    recorded = (out / "config.yaml").read_text()
    assert f"strategy: {chosen}" in recorded and "strategy: auto" not in recorded  # repeats the choice exactly
    assert f"nproc_per_node: {summary['world_size']}" in recorded
    # The same model, batch, world and machine: the choice is made from the cache, at once.
    again = scaletrain("plan", "--choose", "--workload", "digits-mlp", "--world-sizes", "2", "--nproc-per-node", "2",
                       "--json", env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["chosen"]["strategy"] and doc["considered"] >= 4 and len(doc["candidates"]) >= 4
    assert doc["flags"][:2] == ["--strategy", doc["chosen"]["strategy"]]
    # One process is a candidate too, and what trained is the fastest predicted: never one
    # predicted slower than one process.
    worlds = {p["world_size"] for p in doc["candidates"]}
    assert worlds == {1, 2}
    fitting = [p for p in doc["candidates"] if p["fits"]]
    assert doc["chosen"]["samples_per_s"] == max(p["samples_per_s"] for p in fitting)
    assert (summary["strategy"], summary["world_size"]) == (doc["chosen"]["strategy"], doc["chosen"]["world_size"])
    one = max(p["samples_per_s"] for p in fitting if p["world_size"] == 1)
    assert doc["chosen"]["samples_per_s"] >= one
    if summary["world_size"] == 1:  # said why, in one line
        assert sum(line.startswith("scaletrain: One process: distributing is predicted to lose here")
                   for line in first.stdout.splitlines()) == 1
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


def test_a_choice_may_be_one_process_and_says_why():
    """Every world size up to the one given is a candidate, one process first; the fastest
    predicted is chosen, one process included, and never one predicted slower than it."""
    from dataclasses import replace

    from scaletrain.plan.choose import choose, world_sizes_up_to
    from scaletrain.plan.probe import Compute

    from .test_measure_cost_models import probe
    from .test_measure_formulas import _options as options

    assert world_sizes_up_to(4) == [1, 2, 3, 4] and world_sizes_up_to(4, across_hosts=True) == [1, 4]
    # Two threads are nearly twice as fast as one: two processes of one thread each, with an
    # all-reduce to pay, lose to one process.
    slow_one_thread = replace(probe(), compute={**probe().compute, 1: Compute(0.099, 0.001, 0.089, 0.009, 2)})
    choice = choose([slow_one_thread], 2, 32, options())
    assert {p.world_size for p in choice.candidates} == {1, 2}
    assert (choice.chosen.strategy, choice.chosen.world_size) == ("single", 1)
    assert choice.flags() == ["--strategy", "single"]
    assert choice.distributed is not None and choice.distributed.speedup < 1.0
    one_process_line = [s for s in choice.lines()[0].split(". ") if s.startswith("One process")]
    assert len(one_process_line) == 1 and f"{choice.distributed.speedup:.2f}×" in one_process_line[0]
    # One thread nearly as fast as two: two processes win, and the choice is theirs.
    fast_one_thread = replace(probe(), compute={**probe().compute, 1: Compute(0.052, 0.001, 0.042, 0.009, 2)})
    choice = choose([fast_one_thread], 2, 32, options())
    assert choice.chosen.world_size == 2 and choice.chosen.speedup > 1.0
    assert choice.chosen.samples_per_s == max(p.samples_per_s for p in choice.candidates if p.fits)
