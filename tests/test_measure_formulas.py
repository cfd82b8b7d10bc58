"""The pure parts of bench, comm and plan: bandwidth factors, the cost model, learning-rate
rules, the configurations a bench runs, and the plan's conclusions."""

import math

import pytest

from scaletrain.bench.configs import BASELINE_LABEL, bench_configs
from scaletrain.bench.lr import lr_factor, warmup_multiplier
from scaletrain.comm.bandwidth import algbw, bus_factor, busbw, human_bytes, parse_size, parse_sizes
from scaletrain.foundation.errors import UsageError
from scaletrain.measure.footprint import Footprint
from scaletrain.plan import formulas as f
from scaletrain.plan.predict import predict, predict_all
from scaletrain.plan.probe import Compute, Probe
from scaletrain.plan.probe_link import Link, link_from_rows
from scaletrain.plan.machine import Machine
from scaletrain.plan.scenario import threads_needed
from scaletrain.plan.verdict import verdicts


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("broadcast", 8, 1.0), ("sendrecv", 2, 1.0), ("all_to_all", 4, 0.75),
])
def test_bus_factors_are_the_nccl_tests_ones(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)
    assert busbw(op, 1e6, 1e-3, n) == pytest.approx(algbw(1e6, 1e-3) * factor)


def test_unknown_collective_is_a_usage_error():
    with pytest.raises(UsageError, match="--ops"):
        bus_factor("gather", 2)


def test_sizes_parse_lists_and_power_of_4_ranges():
    assert parse_size("16M") == 16 * 1024**2
    assert parse_size("4096") == 4096
    assert parse_size("1kb") == 1024
    assert parse_sizes("1K:16K") == [1024, 4096, 16384]
    assert parse_sizes("1M,16M") == [1024**2, 16 * 1024**2]
    assert human_bytes(16 * 1024**2) == "16M"
    for bad in ("3Q", "", "16M:1K", "0"):
        with pytest.raises(UsageError, match="--sizes"):
            parse_sizes(bad)


def test_ring_all_reduce_is_bandwidth_plus_latency_terms():
    # 2(n-1)/n × S / busbw + 2(n-1) × alpha
    assert f.ring_all_reduce_seconds(8e6, 2, 1e9, 1e-4) == pytest.approx(8e-3 + 2e-4)
    assert f.ring_all_reduce_seconds(8e6, 8, 1e9, 1e-4) == pytest.approx(2 * 7 / 8 * 8e-3 + 14e-4)
    assert f.ring_all_reduce_seconds(8e6, 1, 1e9, 1e-4) == 0.0
    assert f.ring_all_gather_seconds(8e6, 4, 1e9, 0.0) == pytest.approx(0.75 * 8e-3)


def test_ddp_buckets_follow_ddp_first_small_then_25_mib():
    mib = 1024 * 1024
    assert f.ddp_buckets([10, 20, 30]) == [60]
    assert f.ddp_buckets([2 * mib, 30 * mib, 1 * mib]) == [2 * mib, 30 * mib, 1 * mib]
    assert f.ddp_buckets([mib // 2, mib // 2, 10 * mib, 10 * mib, 10 * mib]) == [mib, 30 * mib]
    two = f.ddp_comm_seconds([mib // 2, mib // 2, 10 * mib], 2, 1e9, 1e-4)
    assert two == pytest.approx(f.ring_all_reduce_seconds(mib, 2, 1e9, 1e-4)
                                + f.ring_all_reduce_seconds(10 * mib, 2, 1e9, 1e-4))


def test_pipeline_bubble_and_step():
    assert f.pipeline_bubble(1, 4) == 0.0
    assert f.pipeline_bubble(4, 4) == pytest.approx(3 / 7)
    assert f.pipeline_bubble(2, 8) == pytest.approx(1 / 9)


def test_memory_per_device():
    # half the blocks' bytes, the activations of min(p, m) of m micro-batches on 1/p of the model
    assert f.memory_pipeline(50, 100, 100, 100, 200, 80, 2, 4) == pytest.approx(200 + 80 / 2 * 2 / 4)


def test_exposed_communication_and_speedup():
    assert f.exposed_seconds(10, 6, 0.0) == 10
    assert f.exposed_seconds(10, 6, 1.0) == 4
    assert f.exposed_seconds(10, 20, 1.0) == 0
    assert f.speedup(0.1, 64, 0.1, 32) == pytest.approx(2.0)


def test_learning_rate_rules_and_warmup():
    assert lr_factor("none", 8) == 1.0
    assert lr_factor("linear", 8) == 8.0
    assert lr_factor("sqrt", 4) == 2.0
    with pytest.raises(UsageError, match="--lr-scaling"):
        lr_factor("cubic", 2)
    assert warmup_multiplier(0, 4.0, 10) == pytest.approx(0.25)  # the one-process rate at first
    assert warmup_multiplier(5, 4.0, 10) == pytest.approx(0.625)
    assert warmup_multiplier(10, 4.0, 10) == 1.0
    assert warmup_multiplier(99, 4.0, 10) == 1.0
    assert warmup_multiplier(0, 1.0, 10) == 1.0


def test_bench_configurations_start_with_the_threads_only_baseline():
    configs, notes = bench_configs(["ddp", "single"], [1, 2], ["none", "linear"], 2, accuracy=True)
    assert configs[0].label == BASELINE_LABEL and configs[0].baseline and configs[0].threads == 2
    labels = [c.label for c in configs]
    assert labels == [BASELINE_LABEL, "ddp ×1", "ddp ×2, lr none", "ddp ×2, lr linear"]
    assert notes == ["single on 2 processes left out: single runs one process"]
    configs, _ = bench_configs(["ddp"], [1, 2], ["none"], 2, accuracy=False)
    assert [c.label for c in configs] == [BASELINE_LABEL, "ddp ×1", "ddp ×2"]


def test_link_from_comm_rows_separates_latency_from_bandwidth():
    rows = [{"op": "all_reduce", "bytes": 4096, "seconds": 2e-4, "world_size": 2},
            {"op": "all_reduce", "bytes": 8_000_000, "seconds": 8.2e-3, "world_size": 2},
            {"op": "broadcast", "bytes": 4096, "seconds": 1.0, "world_size": 2}]
    link = link_from_rows(rows, "test")
    assert link.alpha_s == pytest.approx(1e-4)
    assert link.busbw == pytest.approx(8e6 / 8e-3)
    # the model gives back the measured time at the measured size
    assert f.ring_all_reduce_seconds(8e6, 2, link.busbw, link.alpha_s) == pytest.approx(8.2e-3)
    with pytest.raises(UsageError, match="all_reduce"):
        link_from_rows(rows[2:], "test")


def test_fsdp_collectives_measured_beyond_a_ring_scale_its_communication():
    # Gloo's all_gather and reduce_scatter are not the ring the model assumes: their measured
    # times against a ring's at the same size scale FSDP's gathers and reduce-scatters.
    rows = [{"op": "all_reduce", "bytes": 4096, "seconds": 2e-4, "world_size": 2},
            {"op": "all_reduce", "bytes": 8_000_000, "seconds": 8.2e-3, "world_size": 2}]
    plain = link_from_rows(rows, "test")
    assert (plain.gather_ratio, plain.scatter_ratio) == (1.0, 1.0)  # not measured: a ring
    ring = f.ring_all_gather_seconds(8e6, 2, plain.busbw_for(8e6), plain.alpha_s)
    measured = link_from_rows([*rows, {"op": "all_gather", "bytes": 8_000_000, "seconds": 2 * ring, "world_size": 2},
                               {"op": "reduce_scatter", "bytes": 8_000_000, "seconds": 3 * ring, "world_size": 2}],
                              "test")
    assert measured.gather_ratio == pytest.approx(2.0) and measured.scatter_ratio == pytest.approx(3.0)
    base = f.fsdp_comm_seconds(4e6, 4e6, 2, 4, 1e9, 1e-4)
    gathers = 2 * 4 * f.ring_all_gather_seconds(1e6, 2, 1e9, 1e-4)
    assert f.fsdp_comm_seconds(4e6, 4e6, 2, 4, 1e9, 1e-4, 2, 2.0, 3.0) == pytest.approx(2 * gathers + 3 * (base - gathers))


def test_link_keeps_the_bandwidth_of_each_measured_size():
    rows = [{"op": "all_reduce", "bytes": 4096, "seconds": 2e-4, "world_size": 2},
            {"op": "all_reduce", "bytes": 1_000_000, "seconds": 2.2e-3, "world_size": 2},
            {"op": "all_reduce", "bytes": 8_000_000, "seconds": 8.2e-3, "world_size": 2}]
    link = link_from_rows(rows, "test")
    assert link.busbw_for(900_000) == pytest.approx(1e6 / 2e-3)  # small messages: the 1 MB figure
    assert link.busbw_for(30_000_000) == pytest.approx(8e6 / 8e-3) == link.busbw
    for size, seconds in ((1e6, 2.2e-3), (8e6, 8.2e-3)):  # every measured size comes back exactly
        assert f.ring_all_reduce_seconds(size, 2, link.busbw_for(size), link.alpha_s) == pytest.approx(seconds)


def _probe(step_2_threads=0.1, step_1_thread=0.15, grad=8_000_000, busbw=1e9, alpha=1e-4):
    footprint = Footprint(param_bytes=grad, grad_bytes=grad, optimizer_bytes=2 * grad,
                          activation_bytes_per_sample=1000.0, largest_block_param_bytes=grad // 2,
                          block_param_bytes=(grad // 4, grad // 2, grad // 8, grad // 8), grad_tensor_bytes=(grad,),
                          boundary_bytes_per_sample=100.0)
    # steps of data 1 ms, optimizer 9 ms, the rest forward + backward
    compute = {2: Compute(step_2_threads, 1e-3, step_2_threads - 1e-2, 9e-3, 1),
               1: Compute(step_1_thread, 1e-3, step_1_thread - 1e-2, 9e-3, 2)}
    return Probe(workload="w", batch_size=32, device_type="cpu", cores=2, compute=compute, footprint=footprint,
                 link=Link(alpha_s=alpha, busbw=busbw, nproc=2, source="test"), block_params=(2, 4, 1, 1))


def _options(**kw):
    values = dict(nproc_per_node=2, cores=2, link_gbps=10.0, link_latency_s=2e-5, overlap=0.0,
                  device_memory_bytes=1e12)
    values.update(kw)
    return Machine(**values)


def test_ddp_prediction_uses_compute_at_the_threads_each_process_gets():
    probe, options = _probe(), _options()
    assert threads_needed([1, 2, 8], options, "cpu") == [2, 1]
    p = predict(probe, "ddp", 2, options)
    comm = f.ring_all_reduce_seconds(8e6, 2, 1e9, 1e-4)
    assert p.threads == 1 and p.nodes == 1
    assert p.step_s == pytest.approx(0.15 + comm)
    assert p.speedup == pytest.approx((64 / (0.15 + comm)) / (32 / 0.1))
    assert p.efficiency == pytest.approx(p.speedup / 2)
    # 8 processes: 4 machines, the ring limited by a 4 Gbit/s network (0.5 GB/s). The cores' own
    # part (the all-reduce at this machine's 1 GB/s) is exposed; the network's time beyond it
    # hides behind the backward (2/3 of forward + backward at 1 thread, 0.14 s).
    p8 = predict(probe, "ddp", 8, _options(link_gbps=4.0))
    assert p8.nodes == 4
    comm = f.ring_all_reduce_seconds(8e6, 8, 0.5e9, 1e-4)
    on_cores = f.ring_all_reduce_seconds(8e6, 8, 1e9, 1e-4)
    assert p8.comm_s == pytest.approx(comm)
    assert p8.exposed_comm_s == pytest.approx(on_cores + max(0.0, comm - on_cores - 2 / 3 * 0.14))
    slow = predict(probe, "ddp", 8, _options(link_gbps=0.1))  # a network far slower than the backward
    slow_comm = f.ring_all_reduce_seconds(8e6, 8, 0.1e9 / 8, 1e-4)
    assert slow.exposed_comm_s == pytest.approx(slow_comm - 2 / 3 * 0.14)
    assert predict(probe, "ddp", 1, options).speedup == pytest.approx(1.0)


def test_fsdp_and_pipeline_memory_shrinks_with_processes():
    probe, options = _probe(), _options()
    ddp = predict(probe, "ddp", 8, options)
    fsdp = predict(probe, "fsdp", 8, options)
    assert fsdp.memory_bytes < ddp.memory_bytes
    pipe = predict(probe, "pipeline", 2, options)
    assert pipe.global_batch == 32 and "bubble" in pipe.note
    assert predict(probe, "pipeline", 8, options) is None  # 4 blocks cannot make 8 stages
    assert predict(probe, "hybrid-unknown", 2, options) is None


def test_verdicts_say_when_distributing_does_not_pay_and_what_fits():
    slow_link = _probe(busbw=1e7)  # communication dwarfs compute
    lines = verdicts(predict_all(slow_link, ["single", "ddp"], [1, 2, 8], _options()), 1e12)
    assert any(line.startswith("Distributing will not pay here") for line in lines)
    fast = _probe(step_1_thread=0.11, busbw=1e12, alpha=0.0)
    lines = verdicts(predict_all(fast, ["single", "ddp"], [1, 2], _options()), 1e12)
    assert lines[-1].startswith("Best predicted: ddp on 2 processes")
    # Too noisy to tell: no best named, however good a prediction looks.
    lines = verdicts(predict_all(fast, ["single", "ddp"], [1, 2], _options()), 1e12, noise=(0.9, 3, 0.5))
    assert lines[-1].startswith("Cannot tell at this noise level") and not any("Best" in line for line in lines)
    # A measurement a busy machine spoilt: one thread twice as fast as two makes two processes
    # 3.4× one process on 2 cores — a measurement's error, never the best configuration.
    spoilt = predict_all(_probe(step_1_thread=0.05), ["single", "ddp"], [1, 2], _options())
    lines = verdicts(spoilt, 1e12)
    assert lines[0].startswith("Measurement error, not a prediction: ddp ×2 at 3.44×") and "Best" not in " ".join(lines)
    small_device = _options(device_memory_bytes=30e6)  # one process needs 4 × 8 MB + activations
    predictions = predict_all(_probe(), ["single", "ddp", "fsdp"], [1, 2, 8, 16], small_device)
    lines = verdicts(predictions, small_device.device_memory_bytes)
    assert lines[0].startswith("The model does not fit one device")
    assert any("fsdp fits from" in line for line in lines)
    assert not any("ddp fits" in line for line in lines)
    assert not math.isnan(predictions[0].speedup)


def test_plan_report_prints_measurements_table_and_conclusions(capsys):
    from scaletrain.plan.report import print_plan

    from scaletrain.plan.summary import expected_error, median_predictions, median_probe, step_spreads
    from scaletrain.plan.verdict import error_line

    probes, options = [_probe(), _probe(step_1_thread=0.16), _probe(step_1_thread=0.17)], _options()
    rounds = [predict_all(p, ["single", "ddp", "fsdp", "pipeline"], [1, 2, 8], options) for p in probes]
    predictions, spreads = median_predictions(rounds)
    ddp2 = next(p for p in predictions if (p.strategy, p.world_size) == ("ddp", 2))
    assert ddp2.speedup == sorted(r.speedup for ps in rounds for r in ps if (r.strategy, r.world_size) == ("ddp", 2))[1]
    assert spreads[("ddp", 2)].low < ddp2.speedup < spreads[("ddp", 2)].high
    error = expected_error(spreads)
    assert 0 < error < 1
    conclusions = verdicts(predictions, options.device_memory_bytes) + [error_line(error, 3)]
    print_plan(median_probe(probes), options, predictions, spreads, step_spreads(probes), 3, conclusions)
    shown = capsys.readouterr().out
    assert "bus bandwidth 1.00 GB/s" in shown and "pipeline" in shown and "memory/device" in shown
    assert "95% interval" in shown and f"Expected error: ±{error:.0%}" in shown
    assert "160.0 ms" in shown  # the median over the rounds of the 1-thread step


def test_more_processes_than_cores_share_them():
    probe = _probe()
    p4 = predict(probe, "ddp", 4, _options(nproc_per_node=4))  # 4 processes on this 2-core machine
    assert p4.nodes == 1 and p4.threads == 1
    assert p4.compute_s == pytest.approx(2 * 0.15)


def test_bench_measures_sync_and_nosync_steps_in_blocks():
    from scaletrain.bench.worker import measured_kinds

    assert measured_kinds(3, 1) == ["sync"] * 3
    kinds = measured_kinds(7, 2)
    assert kinds == (["sync"] * 5 + ["nosync"] * 5) * 2
