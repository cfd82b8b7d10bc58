"""The CPU memory allocator of the processes scaletrain starts: tcmalloc by default where it is
installed (preloaded into every rank, and into `scaletrain train`'s own process when it trains
there), glibc's where it is not, the one asked for with --allocator or the config key, and what
ran recorded in summary.json; a mistake is one line; the doctor names the one line that
installs it."""

from __future__ import annotations

import json

import pytest

from scaletrain.memory import allocator
from scaletrain.cli import main
from scaletrain.foundation.errors import UsageError
from tests.helpers import scaletrain


def test_auto_is_tcmalloc_where_installed_and_glibc_where_not(monkeypatch):
    assert allocator.find("tcmalloc") and allocator.find("jemalloc")  # scripts/test.sh installs both
    assert allocator.resolve("auto") == "tcmalloc" == allocator.BEST
    assert allocator.resolve("auto", steady_memory=True) == "glibc"  # --steady-memory tunes glibc's
    assert allocator.resolve("jemalloc") == "jemalloc" and allocator.resolve("glibc") == "glibc"
    monkeypatch.setattr(allocator, "find", lambda name: None)
    assert allocator.resolve("auto") == "glibc"  # never breaks where it is not installed
    with pytest.raises(UsageError, match=r"allocator='tcmalloc': tcmalloc is not installed here; install it \(.+\) or "
                                         r"choose allocator='auto'"):
        allocator.resolve("tcmalloc")
    with pytest.raises(UsageError, match="steady_memory tunes glibc's allocator, not jemalloc"):
        allocator.resolve("jemalloc", steady_memory=True)


def test_the_environment_preloads_it_and_keeps_what_else_is_preloaded():
    env = allocator.environment("tcmalloc", {"LD_PRELOAD": "/opt/libmine.so /usr/lib/x/libjemalloc.so.2"})
    assert env["LD_PRELOAD"] == f"{allocator.find('tcmalloc')} /opt/libmine.so"
    assert env[allocator.ALLOCATOR_VAR] == "tcmalloc" and int(env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) > 1e12
    assert allocator.environment("glibc", {"LD_PRELOAD": "/usr/lib/x/libtcmalloc_minimal.so.4"})["LD_PRELOAD"] is None


def test_what_runs_is_read_from_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n")
    assert allocator.running(str(maps)) == "jemalloc"
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
    monkeypatch.setattr(allocator, "find", lambda name: None)
    assert main(["doctor", "--no-self-test"]) == 0  # a note, not a problem: training still runs
    out = capsys.readouterr().out
    assert "note     CPU memory allocator: tcmalloc is not installed" in out
    assert f"fix: {allocator.install_line('tcmalloc')}" in out


@pytest.mark.timeout(180)
def test_every_process_runs_the_allocator_asked_for_and_the_summary_says_which(tmp_path):
    # One process, trained in the command's own process: started again with tcmalloc.
    single = tmp_path / "single"
    done = scaletrain("train", "--workload", "digits-mlp", "--nproc-per-node", "1", "--max-steps", "3",
                      "--out", str(single), timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((single / "summary.json").read_text())["allocator"] == "tcmalloc"
    assert "allocator tcmalloc" in done.stdout
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
