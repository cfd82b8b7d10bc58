"""Bad input to bench, comm and plan: one line on stderr, exit status 2, nothing written."""

import pytest

from .helpers import in_process, scaletrain


@pytest.mark.parametrize("args,words", [
    (["bench", "--world-sizes", "0"], "--world-sizes"),
    (["bench", "--world-sizes", "one"], "--world-sizes"),
    (["bench", "--strategy", "ddp", "--microbatches", "4"], "--microbatches applies to mp, hybrid, pipeline"),
    (["bench", "--strategy", "fsdp", "--tp", "3"], "do not fit"),
    (["bench", "--strategy", "nosuch"], "--strategy"),
    (["bench", "--lr-scaling", "cubic"], "--lr-scaling"),
    (["bench", "--strategy", "single", "--world-sizes", "2"], "--strategy ddp"),
    (["bench", "--model", "nosuchmodule:build"], "--model"),
    (["bench", "--steps", "0"], "--steps"),
    (["bench", "--budget", "0"], "--budget"),
    (["bench", "--rounds", "0"], "--rounds"),
    (["bench", "--worth-at", "-1"], "--worth-at"),
    (["bench", "--comm", "/nonexistent/comm.json"], "--comm"),
    (["comm", "--ops", "all_to_none"], "--ops"),
    (["comm", "--sizes", "3Q"], "--sizes"),
    (["comm", "--nproc", "1"], "--nproc 2"),
    (["comm", "--backend", "nccl"], "nccl"),
    (["comm", "--sizes", "64G", "--ops", "all_reduce"], "available; choose sizes up to"),  # checked before allocating
    (["plan", "--world-sizes", "2,x"], "--world-sizes"),
    (["plan", "--comm", "/nonexistent/comm.json"], "--comm"),
    (["plan", "--overlap", "2"], "--overlap"),
    (["plan", "--strategy", "nosuch"], "--strategy"),
    (["plan", "--probe-rounds", "0"], "--probe-rounds"),
    (["plan", "--out", "/nonexistent/plan.json"], "--out"),
    # Refused before measuring: no configuration asked for can be predicted (it once measured
    # for minutes, printed an empty table and blamed noise).
    (["plan", "--workload", "stdlib-gpt", "--strategy", "tp", "--tp", "3", "--world-sizes", "1,2"],
     "nothing to predict: tp on 1 process(es)"),
    (["plan", "--workload", "stdlib-gpt", "--strategy", "tp", "--tp", "3", "--world-sizes", "3"],
     "4 attention heads, which cannot be split 3 ways"),
    # --choose keeps the strategies and degrees given, so an unknown or impossible one is refused.
    (["plan", "--choose", "--strategy", "nosuch", "--world-sizes", "2"], "unknown strategy 'nosuch'"),
    (["plan", "--choose", "--workload", "digits-mlp", "--tp", "3", "--world-sizes", "2"], "--tp 3"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, words):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    extra = ["--out", str(out)] if args[0] == "bench" else []
    code, _out, err = in_process(capsys, *args, *extra)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scaletrain"), err
    assert words in lines[0]
    assert not out.exists()


def test_a_real_process_prints_one_line_without_traceback(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "bench.json").write_text("{}")
    result = scaletrain("bench", "--out", str(tmp_path / "old"), timeout=60)
    assert result.returncode == 2 and "already holds files" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = scaletrain("comm", "--sizes", "1K:", timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_measurement_that_runs_out_of_memory_is_one_line(tmp_path):
    """`train --strategy auto` on a process memory limit its one-process measurement cannot
    meet: the probe job's one line, then nothing more (scaletrain's own traceback followed)."""
    import shlex
    import sys

    from .helpers import run, test_env

    argv = [sys.executable, "-m", "scaletrain", "train", "--strategy", "auto", "--workload", "synthetic-mlp",
            "--batch-size", "512", "--nproc-per-node", "2", "--out", str(tmp_path / "run")]
    done = run(["bash", "-c", f"ulimit -d 480000; exec {shlex.join(argv)}"], timeout=120,
               env=test_env(XDG_CACHE_HOME=str(tmp_path / "cache")))
    errors = [line for line in done.stderr.splitlines() if line.startswith("scaletrain: error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and "ran out of memory in one process" in errors[0] and "--batch-size" in errors[0], \
        done.stderr[-3000:]
    assert not (tmp_path / "run").exists()


def test_a_host_that_does_not_answer_is_one_line(tmp_path):
    """plan --hosts with a host nobody answers at: checked before anything starts, one line
    naming the host and what failed, within seconds (not mpirun's pages after the probes)."""
    import time

    from .helpers import test_env

    started = time.monotonic()
    done = scaletrain("plan", "--hosts", "127.0.0.1:1,127.0.0.9:1", "--world-sizes", "2", "--strategy", "ddp",
                      "--workload", "digits-mlp", "--steps", "3", "--warmup", "1", "--min-seconds", "0.1",
                      "--probe-rounds", "1", timeout=150, env=test_env(XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert time.monotonic() - started < 30 and done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scaletrain: error: --hosts: host 127.0.0.9 ") \
        and "refused" in lines[0], done.stderr[-3000:]
