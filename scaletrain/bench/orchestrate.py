"""The jobs a bench runs every round: each configuration in fresh processes, and a plan of
them from that round's own measurements.

Each configuration is a job of its own (spawn), so that no configuration inherits another's
threads, memory or process group, and each round starts every job afresh: what a process
happens to get (its memory, its cores) varies between rounds, and the intervals include it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

from ..measure.failed import measurement_failed
from ..measure.jobs import run_job
from ..measure.rounds import Job
from .spec import BenchSettings, RunSpec, to_argv

RESULT_FILE = "result.json"
PROBE_KEY = "plan's measurements"


def measure_config(settings: BenchSettings, spec: RunSpec, folder: Path, hosts=None) -> dict:
    code = run_job([*to_argv(settings, spec), "--out", str(folder)], spec.world_size, hosts)
    if code != 0 or not (folder / RESULT_FILE).exists():
        raise measurement_failed(f"measuring {spec.key}", code, hosts)
    return json.loads((folder / RESULT_FILE).read_text())


def _config_line(result: dict) -> str:
    accuracy = f", held-out accuracy {result['eval_accuracy']:.3f}" if "eval_accuracy" in result else ""
    return f"{result['samples_per_s']:,.0f} samples/s{accuracy}"


def _probe_line(result: dict) -> str:
    probe = result["probe"]
    steps = ", ".join(f"{c.copies} × {t} thread(s) {c.step_s * 1e3:.1f} ms"
                      for t, c in sorted(probe.compute.items(), reverse=True))
    return f"step without communication: {steps}"


def config_job(settings: BenchSettings, spec: RunSpec, hosts=None) -> Job:
    def run(folder: Path, round_index: int) -> dict:
        # Accuracy: a new seed each round (weights, data order), so that the interval shows
        # how much held-out accuracy moves with the seed alone.
        chosen = dataclasses.replace(settings, seed=settings.seed + round_index) if settings.accuracy else settings
        return measure_config(chosen, spec, folder, hosts)

    return Job(spec.key, run, _config_line)


def plan_job(request) -> Job:
    """Each round, a plan of the configurations from that round's own measurements (made in
    this round, in its alternating order): what its predictions are compared with."""
    from dataclasses import replace

    from ..plan import OneRound, make_plan

    def run(folder: Path, round_index: int) -> dict:
        one = replace(request.measuring, one_round=OneRound(folder, reverse=round_index % 2 == 1))
        plan = make_plan(replace(request, measuring=one))
        return {"probe": plan.probes[0], "plan": plan}

    return Job(PROBE_KEY, run, _probe_line)


def bench_jobs(settings: BenchSettings, configs: list[RunSpec], plan: Optional[object], hosts=None) -> list[Job]:
    """The plan's measurements first (when predicting), then the configurations (those of
    several processes across `hosts`, measure.jobs.Hosts, when given)."""
    jobs = [config_job(settings, spec, hosts) for spec in configs]
    return ([plan_job(plan)] if plan is not None else []) + jobs
