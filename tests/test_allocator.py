"""The CPU memory allocator of the processes scaletrain starts: mimalloc by default (its library
comes with scaletrain's own install: the cmeel-mimalloc wheel), tcmalloc where mimalloc is not
installed and tcmalloc is, glibc's where neither is (with a note saying how to get mimalloc);
preloaded into every rank, and into `scaletrain train`'s own process when it trains there; the
one asked for with --allocator or the config key; what ran, and why, in summary.json; a mistake
is one line; the doctor names the one line that installs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scaletrain.memory import allocator
from scaletrain.cli import main
from scaletrain.foundation.errors import UsageError
from tests.helpers import scaletrain


def test_auto_is_mimalloc_then_tcmalloc_then_glibc(monkeypatch):
    # pip installs mimalloc with scaletrain; scripts/test.sh apt-installs tcmalloc and jemalloc.
    assert allocator.find("mimalloc") and allocator.find("tcmalloc") and allocator.find("jemalloc")
    assert "cmeel.prefix" in allocator.find("mimalloc")  # the wheel's, not a distribution's
    assert allocator.resolve("auto") == "mimalloc" == allocator.PREFERENCE[0]
    assert allocator.reason("auto", False, "mimalloc") == "the default, from the cmeel-mimalloc package"
    assert allocator.resolve("auto", steady_memory=True) == "glibc"  # --steady-memory tunes glibc's
    assert allocator.resolve("jemalloc") == "jemalloc" and allocator.resolve("glibc") == "glibc"
    real = allocator.find
    monkeypatch.setattr(allocator, "find", lambda name: None if name == "mimalloc" else real(name))
    assert allocator.resolve("auto") == "tcmalloc"  # a machine without the wheel (another platform)
    assert allocator.reason("auto", False, "tcmalloc").endswith("(mimalloc not installed)")
    monkeypatch.setattr(allocator, "find", lambda name: None)
    assert allocator.resolve("auto") == "glibc"  # never breaks where none is installed, and says so
    assert "`pip install cmeel-mimalloc` brings mimalloc" in allocator.reason("auto", False, "glibc")
    # Under `ulimit -d`, which counts what mimalloc maps ahead of use, the next installed one.
    monkeypatch.setattr(allocator, "find", real)
    monkeypatch.setattr(allocator, "data_limit", lambda: 480_000_000)
    assert allocator.resolve("auto") == "tcmalloc" and "ulimit -d" in allocator.reason("auto", False, "tcmalloc")
    monkeypatch.setattr(allocator, "find", lambda name: None)
    with pytest.raises(UsageError, match=r"allocator='tcmalloc': tcmalloc is not installed here; install it \(.+\) or "
                                         r"choose allocator='auto'"):
        allocator.resolve("tcmalloc")
    with pytest.raises(UsageError, match="steady_memory tunes glibc's allocator, not jemalloc"):
        allocator.resolve("jemalloc", steady_memory=True)


def test_without_tcmalloc_the_default_is_mimalloc_and_a_sharded_run_gives_freed_memory_back(monkeypatch):
    """A fresh install (no apt-get): mimalloc. A process of a run that shards its model (FSDP:
    scaletrain.init calls return_freed_at_once) gives 400 MB it frees back at once; any other keeps
    it a moment (mimalloc's own default: freed tensors come back each step at no cost)."""
    real = allocator.find
    monkeypatch.setattr(allocator, "find", lambda name: None if name == "tcmalloc" else real(name))
    assert allocator.resolve("auto") == "mimalloc"
    env = {k: v for k, v in allocator.environment("mimalloc", {}).items() if v is not None}
    assert env["LD_PRELOAD"] == real("mimalloc")
    code = ("import sys, re, torch\n"
            "from scaletrain.memory import allocator\n"
            "if sys.argv[1] == 'sharded': allocator.return_freed_at_once()\n"
            "rss = lambda: int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024\n"
            "before = rss(); x = torch.ones(100 << 20); held = rss(); del x\n"
            "print(before, held, rss(), allocator.described())")
    for run, kept in (("sharded", False), ("replicated", True)):
        done = subprocess.run([sys.executable, "-c", code, run], env={**_plain_env(), **env}, capture_output=True,
                              text=True, timeout=120)
        before, held, after, *described = done.stdout.split()
        assert int(held) - int(before) > 350, done.stdout + done.stderr  # it held the tensor
        assert (int(after) - int(before) > 350) == kept, (run, done.stdout)  # given back when freed, or kept a moment
        assert " ".join(described) == ("mimalloc" if kept else "mimalloc (freed memory returned at once)")


def _plain_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("MIMALLOC_", "LD_PRELOAD"))}


def test_the_environment_preloads_it_and_keeps_what_else_is_preloaded():
    env = allocator.environment("tcmalloc", {"LD_PRELOAD": "/opt/libmine.so /usr/lib/x/libjemalloc.so.2"})
    assert env["LD_PRELOAD"] == f"{allocator.find('tcmalloc')} /opt/libmine.so"
    assert env[allocator.ALLOCATOR_VAR] == "tcmalloc" and int(env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) > 1e12
    assert allocator.environment("glibc", {"LD_PRELOAD": "/usr/lib/x/libtcmalloc_minimal.so.4"})["LD_PRELOAD"] is None


def test_what_runs_is_read_from_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n")
    assert allocator.running(str(maps)) == "jemalloc"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /venv/lib/python3.11/site-packages/cmeel.prefix/lib/libmimalloc.so.3\n")
    assert allocator.running(str(maps)) == "mimalloc"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert allocator.running(str(maps)) == "glibc"


@pytest.mark.parametrize("release,line", [
    ('ID=debian\n', "apt-get install libtcmalloc-minimal4"),
    ('ID=ubuntu\nID_LIKE=debian\n', "apt-get install libtcmalloc-minimal4"),
    ('ID="rocky"\nID_LIKE="rhel centos fedora"\n', "dnf install gperftools-libs"),
])
def test_the_install_line_follows_the_distribution(tmp_path, monkeypatch, release, line):
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    (tmp_path / "os-release").write_text(release)
    assert allocator.install_line("tcmalloc", str(tmp_path / "os-release")) == line


def test_doctor_names_a_missing_allocator_and_its_install_line(capsys, monkeypatch):
    assert main(["doctor", "--no-self-test"]) == 0
    assert "ok       CPU memory allocator: mimalloc (" in capsys.readouterr().out  # and why: the package it came from
    monkeypatch.setattr(allocator, "find", lambda name: None)
    assert main(["doctor", "--no-self-test"]) == 0  # a note, not a problem: training still runs
    out = capsys.readouterr().out
    assert "note     CPU memory allocator: glibc's malloc, since none of mimalloc, tcmalloc is installed" in out
    assert "fix: pip install cmeel-mimalloc" in out


@pytest.mark.timeout(180)
def test_every_process_runs_the_allocator_asked_for_and_the_summary_says_which(tmp_path):
    # One process, trained in the command's own process: started again with mimalloc, the default.
    single = tmp_path / "single"
    done = scaletrain("train", "--workload", "digits-mlp", "--nproc-per-node", "1", "--max-steps", "3",
                      "--out", str(single), timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads((single / "summary.json").read_text())
    assert (summary["allocator"], summary["allocator_reason"]) == ("mimalloc", "the default, from the cmeel-mimalloc package")
    assert "allocator mimalloc" in done.stdout
    # Two ranks under the spawn launcher, with the allocator of a configuration file.
    config = tmp_path / "run.yaml"
    config.write_text("allocator: jemalloc\nnproc_per_node: 2\n")
    ranks = tmp_path / "ranks"
    done = scaletrain("train", "--config", str(config), "--workload", "digits-mlp", "--max-steps", "3",
                      "--out", str(ranks), timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((ranks / "summary.json").read_text())["allocator"] == "jemalloc"
    assert "allocator: jemalloc" in (ranks / "config.yaml").read_text()
    # glibc's, by name; a mistake is one line.
    wrong = scaletrain("train", "--allocator", "jemalloc", "--steady-memory", "--out", str(tmp_path / "no"))
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines() == [
        "scaletrain: error: --steady-memory tunes glibc's allocator, not jemalloc; give one of them (--allocator glibc "
        "with --steady-memory, or --allocator jemalloc alone)"]
    plain = tmp_path / "glibc"
    done = scaletrain("train", "--workload", "digits-mlp", "--nproc-per-node", "1", "--max-steps", "3",
                      "--allocator", "glibc", "--out", str(plain), timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((plain / "summary.json").read_text())["allocator"] == "glibc"


def test_the_commands_said_to_choose_it_are_those_that_take_allocator(capsys):
    """The module's docstring once named `comm`, which has no --allocator."""
    import re

    from scaletrain.cli.allocator_choice import COMMANDS

    said = re.search(r"processes \(([a-z, ]+)\) put it", " ".join(allocator.__doc__.split())).group(1)
    assert set(said.split(", ")) == set(COMMANDS)
    for command in COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--allocator" in capsys.readouterr().out, command
