"""Rounds that other processes disturbed are left out and run again; the meter that tells
them sees a busy process that is not the bench's, and not the bench's own children."""

import os
import subprocess
import sys
import time

from scaletrain.measure.rounds import Job, Limits, keep_going, run_rounds
from scaletrain.measure.machine_load import LoadMeter

BURN = "import time\nwhile time.process_time() < {s}: pass"  # burns {s} CPU seconds


class FakeMeter:
    """The cores other processes used during each job, in the order the jobs run."""

    def __init__(self, loads):
        self.loads = iter(loads)

    def __call__(self):
        load = next(self.loads)
        return type("Load", (), {"other_cores": staticmethod(lambda: load)})()


def test_a_disturbed_round_is_left_out_and_run_again(tmp_path):
    runs = []
    jobs = [Job(key, lambda folder, i, key=key: runs.append((key, i)) or {"round": i}) for key in ("a", "b")]
    # round 1 clean; round 2 (backwards: b, a): job a ran beside 0.9 busy cores; rounds 3 and 4 clean
    meter = FakeMeter([0.0, 0.1, 0.0, 0.9, 0.05, 0.0, 0.0, 0.0])
    said = []
    rounds = run_rounds(jobs, tmp_path, Limits(budget_s=1e9, fixed_rounds=3, max_other_cores=0.25),
                        lambda results: False, said.append, meter=meter)
    assert rounds.kept == 3 and rounds.results["a"] == [{"round": 0}, {"round": 1}, {"round": 2}]
    assert rounds.left_out == [{"round": 2, "job": "a", "other_cores": 0.9}]
    assert len(runs) == 8  # four rounds of two jobs were run, the second one again
    assert any("round 2 left out" in line and "--max-other-load" in line for line in said)


def test_the_rounds_left_out_are_bounded():
    fixed = Limits(budget_s=1, fixed_rounds=2)
    assert keep_going(1, False, 0, 0, fixed, attempts=3)[0]
    stop, why = keep_going(1, False, 0, 0, fixed, attempts=4)
    assert not stop and "twice as many" in why
    assert not keep_going(0, False, 0, 0, Limits(budget_s=1e9), attempts=50)[0]
    # rounds left out on a busy machine stop at the budget, even short of two kept rounds
    assert keep_going(1, False, 90, 20, Limits(budget_s=100), attempts=1)[0]
    stop, why = keep_going(1, False, 90, 20, Limits(budget_s=100), attempts=3)
    assert not stop and "budget" in why


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a running process, from /proc (what the kernel charged it)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_meter_counts_other_processes_not_the_benchs_own_children():
    # Whatever else runs on the machine: our own child's CPU time is ours, not other load; a
    # process we do not wait for is other load, in full.
    tick = 2 / os.sysconf("SC_CLK_TCK")
    meter = LoadMeter()
    subprocess.run([sys.executable, "-c", BURN.format(s=0.6)], check=True)  # our child, waited for
    machine, own, _ = meter.seconds()
    assert own >= 0.6 and machine >= own - tick
    other = subprocess.Popen([sys.executable, "-c", BURN.format(s=30)])  # not waited for while measuring
    try:
        time.sleep(0.2)
        before = _cpu_seconds(other.pid)
        meter = LoadMeter()
        time.sleep(1.0)
        machine, own, wall = meter.seconds()
        used = _cpu_seconds(other.pid) - before
        cores = meter.other_cores()
    finally:
        other.kill()
        other.wait()
    assert used > 0.1 and own < 0.1 and machine - own >= used - tick and wall >= 1.0
    assert cores >= (used - tick) / (wall + 0.1)
