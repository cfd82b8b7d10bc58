"""benchmarks/peers.py --quick: raw DDP and scaletrain's API, one short run each. Checks
that the benchmark works, not how fast anything is (timing belongs to the benchmark)."""

import sys

from .helpers import REPO, run


def test_peers_benchmark_quick_runs_and_writes_its_table(tmp_path):
    out = tmp_path / "peers.md"
    result = run([sys.executable, str(REPO / "benchmarks" / "peers.py"), "--quick", "--nprocs", "2", "--out", str(out)],
                 timeout=240, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    text = out.read_text()
    assert "| synthetic-cnn | 2 | raw |" in text and "| synthetic-cnn | 2 | api |" in text
    assert out.with_suffix(".json").exists()
