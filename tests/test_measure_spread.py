"""The statistics behind bench's figures and verdict, as pure functions: Student's t against
scipy's, the intervals, the stopping rule, the verdict and the rows a bench reports."""

import math
import statistics

import pytest
from scipy import stats

from scaletrain.bench.combine import combine, jsonable, reference_key
from scaletrain.bench.configs import bench_configs
from scaletrain.measure.rounds import Limits, keep_going
from scaletrain.bench.verdict import CANNOT_TELL, NOT_WORTH_IT, WORTH_IT, decide
from scaletrain.measure.spread import paired_ratios, plain_spread, ratio_spread, t_quantile


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 12, 30, 200])
def test_t_quantile_matches_scipy(df):
    assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)
    assert t_quantile(0.9, df) == pytest.approx(stats.t.ppf(0.9, df), rel=1e-9)


def test_ratio_interval_is_the_geometric_means_t_interval():
    values = [0.88, 0.93, 0.90, 0.86]
    s = ratio_spread(values)
    logs = [math.log(v) for v in values]
    half = stats.t.ppf(0.975, 3) * statistics.stdev(logs) / 2
    assert s.median == pytest.approx(statistics.median(values))
    assert (s.low, s.high) == pytest.approx((math.exp(statistics.fmean(logs) - half),
                                             math.exp(statistics.fmean(logs) + half)))
    assert s.rounds == 4 and s.values == tuple(values)
    assert not ratio_spread([0.9]).known  # one round: no interval
    assert ratio_spread([]) is None
    eff = s.scaled(0.5)
    assert (eff.median, eff.low, eff.high) == pytest.approx((s.median / 2, s.low / 2, s.high / 2))


def test_plain_interval_is_cut_at_zero_and_pairs_divide_round_by_round():
    s = plain_spread([0.0, 0.001, 0.0])
    assert s.low == 0.0 and s.high > 0.001 / 3
    assert paired_ratios([2.0, 3.0, None], [1.0, 2.0, 4.0]) == [2.0, 1.5]


def test_rounds_stop_when_decided_or_when_the_budget_would_run_out():
    limits = Limits(budget_s=100, min_rounds=3)
    assert keep_going(1, True, 99, 50, limits)[0]  # an interval needs two rounds, budget or not
    assert keep_going(2, True, 10, 5, limits)[0]  # decided, but fewer than the minimum
    stop, why = keep_going(3, True, 15, 5, limits)
    assert not stop and "decided" in why
    assert keep_going(3, False, 15, 5, limits)[0]
    stop, why = keep_going(5, False, 80, 25, limits)  # 80 + 25 > 100
    assert not stop and "--budget" in why
    fixed = Limits(budget_s=1, fixed_rounds=4)
    assert keep_going(3, True, 1000, 500, fixed)[0] and not keep_going(4, False, 0, 0, fixed)[0]
    assert not keep_going(50, False, 0, 0, Limits(budget_s=1e9))[0]


def _rows(speedups: dict[str, list[float]]):
    ref = {"label": "ddp ×1", "world_size": 1, "samples_per_s": ratio_spread([1000, 1010, 990])}
    rows = [ref]
    for label, values in speedups.items():
        s = ratio_spread(values)
        rows.append({"label": label, "world_size": int(label[-1]), "speedup": s, "efficiency": s.scaled(1 / int(label[-1]))})
    return rows, ref


def test_verdict_needs_the_whole_interval_on_one_side():
    rows, ref = _rows({"ddp ×2": [0.86, 0.90, 0.88, 0.91]})
    v = decide(rows, ref, 1.1)
    assert v.kind == NOT_WORTH_IT and v.decided and "slower than one process" in v.sentence
    assert "95% interval" in v.sentence and "ddp ×1" in v.sentence and "1.1×" in v.sentence
    rows, ref = _rows({"ddp ×2": [1.7, 1.8, 1.75], "ddp ×4": [0.9, 1.4, 1.1]})
    v = decide(rows, ref, 1.1)
    assert v.kind == WORTH_IT and v.best == "ddp ×2" and "efficiency 88%" in v.sentence
    rows, ref = _rows({"ddp ×2": [0.9, 1.3, 1.05]})
    v = decide(rows, ref, 1.1, "; measure longer (--budget)")
    assert v.kind == CANNOT_TELL and not v.decided and v.sentence.endswith("(--budget).")
    rows, ref = _rows({"ddp ×2": [0.9]})
    assert decide(rows, ref, 1.1).kind == CANNOT_TELL  # one round: no interval, no decision
    assert decide(rows[:1], ref, 1.1).kind is None


def _result(rate, **extra):
    return {"samples_per_s": rate, "step_s": 32 / rate, "compute_s": 0.02, "exposed_comm_s": 0.0, "data_s": 0.001,
            "optimizer_s": 0.005, "idle_s": 0.0, "threads_per_process": 2, "global_batch_size": 32, "lr": 1e-3,
            "lr_factor": 1.0, "lr_warmup_steps": 0, "backend": "gloo", "device": "cpu", **extra}


def test_rows_pair_each_round_with_the_fastest_one_process_run_of_the_same_code():
    configs, _ = bench_configs(["ddp"], [2], ["none"], 2, accuracy=False)  # 1 is added: the reference
    assert [c.key for c in configs] == ["threads-only ×1", "ddp ×1", "ddp ×2"]
    results = {"threads-only ×1": [_result(900), _result(800), _result(950)],  # slower: not the reference
               "ddp ×1": [_result(1000), _result(900), _result(1100)],
               "ddp ×2": [_result(900), _result(810), _result(990)]}
    assert reference_key(configs, results) == "ddp ×1"
    rows, reference = combine(configs, results)
    two = rows[2]
    assert reference == "ddp ×1" and rows[1]["reference"] and not two["reference"]
    assert two["speedup"].values == pytest.approx((0.9, 0.9, 0.9))  # paired: the rounds' load cancels
    assert two["speedup"].low == pytest.approx(0.9) and two["efficiency"].median == pytest.approx(0.45)
    assert two["samples_per_s"].high - two["samples_per_s"].low > 100  # unpaired, the rates spread widely
    assert two["speedup_vs_threads_only"].median == pytest.approx(810 / 800)  # median of 1, 1.0125, 1.042
    doc = jsonable(rows)
    assert doc[2]["speedup"]["median"] == pytest.approx(0.9) and doc[2]["speedup"]["rounds"] == 3
