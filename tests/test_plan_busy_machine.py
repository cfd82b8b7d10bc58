"""`scaletrain plan` on a machine another process keeps busy: the rounds it disturbs are left
out and measured again; what stays too noisy — or was all disturbed — is said to be so, and no
configuration is named the best."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import scaletrain


@pytest.mark.timeout(240)
def test_a_busy_core_is_left_out_and_never_turned_into_an_answer(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        done = scaletrain("plan", "--workload", "digits-mlp", "--world-sizes", "1,2", "--strategy", "ddp",
                          "--probe-rounds", "2", "--steps", "3", "--warmup", "1", "--min-seconds", "0.2",
                          "--budget", "12", "--json", timeout=200)
    finally:
        busy.kill()
        busy.wait()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["rounds_left_out"] and all(r["other_cores"] > 0.25 for r in doc["rounds_left_out"])
    assert "left out" in done.stderr  # said while measuring
    conclusions = " ".join(doc["conclusions"])
    if not doc["told"]:  # a busy machine: cannot tell, and says so
        assert "Cannot tell at this noise level" in conclusions or "disturbed" in conclusions
    assert doc["told"] or "Best predicted" not in conclusions
    if doc["told"]:  # quiet rounds were found: within the bound
        assert doc["expected_error"] <= doc["max_error"]
