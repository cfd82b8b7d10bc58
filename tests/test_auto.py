"""`scaletrain train --strategy auto` and `scaletrain plan --choose`: a short measurement, every
configuration predicted, the fastest that fits trained — and the measurement cached per model,
batch, world, machine and memory mode, so the next choice is made at once; cached figures no
measurement gives are measured again. Degrees given beside auto are kept by the choice, and
refused before measuring where nothing can keep them."""

from __future__ import annotations

import json
import os

import pytest

from tests.faults import scaletrain_argv
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
    # The command that trains the choice trains what was planned: plan's default workload is
    # not train's, so the model, the batch per process and the processes are all given.
    command = doc["train_command"]
    assert command[:2] == ["scaletrain", "train"] and command[-len(doc["flags"]):] == doc["flags"]
    given = dict(zip(command[2::2], command[3::2]))
    assert given["--workload"] == "digits-mlp" and int(given["--batch-size"]) == summary["batch_size_per_process"]
    assert int(given["--nproc-per-node"]) == doc["chosen"]["world_size"]
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
    cached_figures_are_checked(tmp_path / "cache" / "scaletrain" / "probes", monkeypatch_home=tmp_path / "cache")


def cached_figures_are_checked(folder, monkeypatch_home):
    """A cache file whose step time is 0 (a ZeroDivisionError once) or negative (a −7× choice
    once) is measured again, with a note, instead of believed; an intact one is used."""
    import os

    from scaletrain.plan.measurements import cached_probes

    (path,) = folder.glob("*.json")
    intact = path.read_text()
    notes = []
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(monkeypatch_home)
    try:
        assert cached_probes(path.stem, notes.append), "the cache written by the run is not read back"
        for bad in (0.0, -0.05):
            doc = json.loads(intact)
            threads = next(iter(doc["probes"][0]["compute"]))
            doc["probes"][0]["compute"][threads]["step_s"] = bad
            path.write_text(json.dumps(doc))
            assert cached_probes(path.stem, notes.append) is None
        assert len(notes) == 2 and all("cannot be right" in n and "step_s is" in n for n in notes), notes
    finally:
        path.write_text(intact)
        if before is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = before


def test_the_cache_of_measurements_tells_steady_memory_apart(monkeypatch):
    """--steady-memory changes a process's speed and peak: its measurements are cached apart."""
    from scaletrain.plan import Candidates, Measuring, PlanRequest, Training, default_machine
    from scaletrain.plan.measurements import cache_key
    from scaletrain.memory.steady import STEADY_MEMORY_VAR

    request = PlanRequest(Training("digits-mlp"), default_machine("cpu", 2), Candidates(choose=2),
                          Measuring(cached=True))
    monkeypatch.delenv(STEADY_MEMORY_VAR, raising=False)
    plain = cache_key(request, "cpu")
    monkeypatch.setenv(STEADY_MEMORY_VAR, "1")
    assert cache_key(request, "cpu") != plain


def test_degrees_given_beside_auto_are_kept_or_refused_before_measuring():
    """`--strategy auto --tp 2`: only configurations with tensor parallel 2 are candidates (it
    once chose ddp and then refused its own choice); a model without a tensor-parallel plan,
    or a degree that does not divide the world, is refused before anything is measured."""
    import torch

    from scaletrain.foundation.errors import UsageError
    from scaletrain.plan.constraints import Constraints, check_possible
    from scaletrain.workloads import get_workload

    def meta(name):
        with torch.device("meta"):
            return get_workload(name).build_model()

    on_two = [("ddp", {}), ("fsdp", {}), ("tp", {"tp": 2}), ("pipeline", {"pp": 2, "microbatches": 4}),
              ("fsdp", {"activation_checkpointing": "full"}), ("tp", {"tp": 2, "activation_checkpointing": "full"})]
    tp2 = Constraints.given({"tp": 2})
    kept = [c for c in on_two if tp2.keeps(*c, 2)]
    assert kept == [("tp", {"tp": 2}), ("tp", {"tp": 2, "activation_checkpointing": "full"})], kept
    check_possible(tp2, 2, meta("stdlib-gpt"), 32)
    for constraints, world, words in ((tp2, 2, "no tensor-parallel plan"), (Constraints.given({"tp": 3}), 2, "tp"),
                                      (Constraints.given({"pp": 2}, ("ddp",)), 2, "--strategy ddp")):
        with pytest.raises(UsageError) as refused:
            check_possible(constraints, world, meta("digits-cnn"), 32)
        assert words in refused.value.for_command_line({"tp": "--tp", "pp": "--pp", "strategy": "--strategy"}), \
            refused.value.raw
    on_four = [("ddp", {}), ("fsdp", {}), ("fsdp", {"dp_replicate": 2}), ("pipeline", {"pp": 2, "dp_shard": 2}),
               ("fsdp", {"dp_replicate": 2, "activation_checkpointing": "full"})]
    fsdp_replicas = Constraints.given({"dp_replicate": 2}, ("fsdp",))
    assert [c for c in on_four if fsdp_replicas.keeps(*c, 4)] == \
        [("fsdp", {"dp_replicate": 2}), ("fsdp", {"dp_replicate": 2, "activation_checkpointing": "full"})]


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
    ratio = choice.distributed.samples_per_s / choice.chosen.samples_per_s  # below 1: what the line says
    assert len(one_process_line) == 1 and ratio < 1.0 and f"{ratio:.2f}×" in one_process_line[0]
    # With the strategy given the world size is fixed: a choice slower than one process says
    # how much faster one process would be, not that it "would do about as well".
    from scaletrain.plan.constraints import Constraints

    forced = choose([slow_one_thread], 2, 32, options(), Constraints.given({}, ("ddp",)))
    assert forced.chosen.world_size == 2 and forced.chosen.speedup < 1.0
    assert "about as well" not in forced.lines()[0]
    assert f"one process (--nproc-per-node 1) is predicted {1 / forced.chosen.speedup:.1f}× as fast" in forced.lines()[0]
    # One thread nearly as fast as two: two processes win, and the choice is theirs.
    fast_one_thread = replace(probe(), compute={**probe().compute, 1: Compute(0.052, 0.001, 0.042, 0.009, 2)})
    choice = choose([fast_one_thread], 2, 32, options())
    assert choice.chosen.world_size == 2 and choice.chosen.speedup > 1.0
    assert choice.chosen.samples_per_s == max(p.samples_per_s for p in choice.candidates if p.fits)
@pytest.mark.timeout(120)
def test_ctrl_c_while_auto_measures_speaks_of_auto(tmp_path):
    """It spoke of "plan", a command the user never typed."""
    import signal
    import sys
    import time

    from tests.launch_helpers import finish_marked, start_marked

    env = test_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc, token = start_marked([sys.executable, "-m", "scaletrain", "train", "--strategy", "auto", "--workload",
                                "digits-mlp", "--nproc-per-node", "2", "--out", str(tmp_path / "run")], env)
    deadline = time.monotonic() + 60
    while "measuring" not in proc.stdout.readline():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
    time.sleep(1.0)  # inside the first probe job
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    result, left = finish_marked(proc, token, timeout=60)
    assert result.returncode == 130 and not left, result.stderr
    assert "plan" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "--strategy auto's measurement stopped by SIGINT" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(180)
def test_a_measuring_rank_that_stops_is_named_within_the_timeout(tmp_path):
    """A rank of auto's measurement stopped (SIGSTOP): the measurement jobs run under the run's
    --timeout like its training, so the job ends naming it (there was no word for 150 s and more)."""
    import signal
    import time

    from tests.faults import Background, cmdline, wait_for
    from tests.conftest import _descendants

    argv = ["train", "--strategy", "auto", "--workload", "digits-mlp", "--nproc-per-node", "2", "--timeout", "10s",
            "--out", str(tmp_path / "run")]
    with Background(scaletrain_argv(*argv), env=test_env(XDG_CACHE_HOME=str(tmp_path / "cache"))) as job:
        def probe_ranks():  # a probe job of two processes (each started for it, not a warm interpreter)
            ranks = sorted(p for p in _descendants(job.proc.pid) if "scaletrain.plan.probe_rank" in cmdline(p))
            return ranks if len(ranks) == 2 else None
        victim = wait_for(probe_ranks, 120, "a probe job of two processes", job.proc)[1]
        time.sleep(0.5)  # into its measurement
        os.kill(victim, signal.SIGSTOP)
        stopped = time.monotonic()
        status, _out, err = job.finish(timeout=90)
    assert status != 0 and time.monotonic() - stopped < 10 + 40, err[-3000:]
    # Stopped while joining, or later: either way named, within the run's --timeout.
    import re

    assert re.search(r"rank \d+ (stopped responding|did not join within 10s)", err), err[-3000:]
    assert "Traceback" not in err, err[-3000:]
