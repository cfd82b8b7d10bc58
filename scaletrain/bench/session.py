"""One `scaletrain bench`, from its first round to its verdict: rounds of every job until the
speedup's interval decides or the budget is spent, then the table, the verdict, the plan
checked against the measurement, bench.json, bench.md and the plots."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .combine import combine, jsonable
from .orchestrate import PROBE_KEY, bench_jobs
from ..measure.rounds import Limits, Rounds, run_rounds
from .spec import BenchSettings, RunSpec
from .verdict import Verdict, decide


@dataclass(frozen=True)
class Session:
    settings: BenchSettings
    configs: list
    notes: list
    limits: Limits
    worth_at: float
    plan: Optional[object]
    """The plan's request for the configurations' predictions (scaletrain.plan.PlanRequest), whose
    measurements each round makes; None: no predictions (--no-predict)."""
    out: Path
    hosts: Optional[object] = None
    """measure.jobs.Hosts the jobs of several processes span; None: this machine."""


def predictions_per_round(configs: list[RunSpec], rounds: list[dict]) -> dict[str, list]:
    """For every configuration, the plan's prediction from each round's measurements."""
    return {spec.key: [result["plan"].prediction_for(spec.strategy, spec.world_size, spec.options)
                       for result in rounds] for spec in configs}


def _analyse(session: Session, results: dict[str, list[dict]], budget_note: str = ""
             ) -> tuple[list[dict], Optional[str], Verdict]:
    configs = session.configs
    probes = results.get(PROBE_KEY) or []
    predictions = predictions_per_round(configs, probes) if probes else None
    rows, reference = combine(configs, {s.key: results[s.key] for s in configs}, predictions)
    ref_row = next((r for r in rows if r["label"] == reference), None)
    return rows, reference, decide(rows, ref_row, session.worth_at, budget_note)


def measure(session: Session, say: Callable[[str], None]) -> Rounds:
    """Runs the rounds; after each, one line on where the speedup stands."""
    def decided_after(results: dict[str, list[dict]]) -> bool:
        rows, _, verdict = _analyse(session, results)
        shown = [f"{r['label']} {r['speedup'].median:.2f}×" + (f" ({r['speedup'].low:.2f}–{r['speedup'].high:.2f})"
                                                                if r["speedup"].known else "")
                 for r in rows if r["world_size"] > 1 and r.get("speedup") is not None]
        if shown:
            say(f"  after {rows[0]['rounds']} round(s): speedup {', '.join(shown)}: "
                f"{verdict.kind or 'no verdict'}")
        return verdict.decided

    jobs = bench_jobs(session.settings, session.configs, session.plan, session.hosts)
    return run_rounds(jobs, session.out, session.limits, decided_after, say)


def _rounds_line(rounds: Rounds, max_other_cores: float) -> str:
    line = f"Measured {rounds.kept} round(s): {rounds.stop_reason}."
    if rounds.left_out:
        busiest = max(r["other_cores"] for r in rounds.left_out)
        line += (f" {len(rounds.left_out)} more left out: other processes kept up to {busiest:.2f} cores busy "
                 f"during them (more than {max_other_cores:g}, --max-other-load).")
    return line


def report(session: Session, rounds: Rounds, title: str, started: float, facts: dict,
           say: Callable[[str], None]) -> int:
    from .plots import ACCURACY_PNG, BREAKDOWN_PNG, SPEEDUP_PNG, accuracy_plot, breakdown_plot, speedup_plot
    from .report import prediction_lines, print_table, write_outputs

    import sys

    results = rounds.results
    hint = "; measure longer (--budget) or on a quieter machine"
    if rounds.kept == 0 and rounds.stopped_by is not None:
        print(f"scaletrain: bench {rounds.stop_reason} before a round was complete; the runs measured so far are in "
              f"{session.out / 'runs'} (a result.json each)", file=sys.stderr)
        return 128 + rounds.stopped_by
    if rounds.kept == 0:
        print(f"scaletrain: error: no round could be kept: other processes kept the machine busy during all "
              f"{len(rounds.left_out)} of them (more than --max-other-load {session.limits.max_other_cores:g} cores); "
              "measure when the machine is quieter, or give a larger --budget", file=sys.stderr)
        return 1
    rows, reference, verdict = _analyse(session, results, budget_note=hint)
    accuracy = session.settings.accuracy
    print_table(rows, title, accuracy)
    closing = [*prediction_lines(rows), _rounds_line(rounds, session.limits.max_other_cores), verdict.sentence]
    for line in closing:
        say(line)
    out = session.out
    plots = [speedup_plot(rows, out / SPEEDUP_PNG, title, session.worth_at), breakdown_plot(rows, out / BREAKDOWN_PNG, title)]
    if accuracy:
        plots.append(accuracy_plot(rows, out / ACCURACY_PNG, title))
    probes = [r["probe"].as_dict() for r in results.get(PROBE_KEY) or []]
    document = {**facts, "settings": session.settings.as_dict(), "title": title, "reference": reference,
                "worth_at": session.worth_at, "verdict": verdict.as_dict(), "stop_reason": rounds.stop_reason,
                "rounds_left_out": rounds.left_out, "max_other_load_cores": session.limits.max_other_cores,
                "configurations": jsonable(rows), "notes": session.notes, "probes": probes,
                "wall_seconds": time.perf_counter() - started}
    written = write_outputs(out, document, rows, title, accuracy, closing)
    say(f"written: {', '.join(str(p) for p in [*written, *plots])} ({document['wall_seconds']:.0f} s)")
    if rounds.stopped_by is not None:
        print(f"scaletrain: bench {rounds.stop_reason} after {rounds.kept} round(s); what they measured is in "
              f"{out / 'bench.md'} and {out / 'bench.json'}", file=sys.stderr)
        return 128 + rounds.stopped_by
    return 0
