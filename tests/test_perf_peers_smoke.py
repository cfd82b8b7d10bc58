"""benchmarks/peers.py at its smallest: raw DDP and scaletrain's API, one short run each; and
the two-host comparison of gradient compression over a capped link. Checks that the
benchmark works, not how fast anything is (timing belongs to the benchmark)."""

import json
import os
import subprocess
import sys

from .helpers import REPO, run

PEERS = str(REPO / "benchmarks" / "peers.py")


def test_peers_benchmark_quick_runs_and_writes_its_table(tmp_path):
    out = tmp_path / "peers.md"
    result = run([sys.executable, PEERS, "--quick", "--nprocs", "2", "--out", str(out)], timeout=240, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    text = out.read_text()
    for runner in ("raw", "api", "api-unpinned"):
        assert f"| synthetic-cnn | 2 | {runner} |" in text
    assert "| api-unpinned ÷ raw, samples/s | synthetic-cnn | 2 |" in text  # the comparison the run is for
    assert out.with_suffix(".json").exists()


def test_two_host_link_comparison_runs_and_cleans_up(tmp_path):
    assert os.geteuid() == 0, "the two-host benchmark needs root (network namespaces); CI runs it as root"
    out = tmp_path / "link.md"
    result = run([sys.executable, PEERS, "--reps", "1", "--nprocs", "2", "--workloads", "digits-mlp",
                  "--runners", "trainer", "--compression", "bf16", "--links", "1gbit", "--epochs", "2",
                  "--out", str(out)], timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads(out.with_suffix(".json").read_text())["results"]
    two_hosts = {key: value for key, value in runs.items() if "2 hosts@1gbit" in key}
    assert sorted(two_hosts) == ["digits-mlp 2p trainer 2 hosts@1gbit", "digits-mlp 2p trainer+bf16 2 hosts@1gbit"]
    for (record,) in two_hosts.values():
        assert record["world_size"] == 2 and record["samples_per_second"] > 0
    assert "| 2 hosts, 1 core each, a 1 Gbit/s link | trainer | bf16 |" in out.read_text()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "st-node" not in namespaces, f"namespaces left behind: {namespaces}"
