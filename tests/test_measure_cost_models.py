"""The cost models of dp, mp, hybrid and pipeline (stages of unequal measured cost), as pure
functions of a hand-made round of measurements."""

import pytest

from scaletrain.measure.footprint import Footprint
from scaletrain.plan import formulas as f
from scaletrain.plan.costs.data_parallel import ddp_comm
from scaletrain.plan.predict import predict
from scaletrain.plan.probe import Compute, Probe, probe_from_dict
from scaletrain.plan.probe_link import Link
from scaletrain.plan.scenario import scenario
from scaletrain.plan.stages import stage_groups

from .test_measure_formulas import _options as options

MB = 1_000_000


def probe(block_s=(0.004, 0.004, 0.020, 0.004), block_params=(2_000, 4_000, 1_000, 1_000), device_type="cpu"):
    footprint = Footprint(param_bytes=8 * MB, grad_bytes=8 * MB, optimizer_bytes=16 * MB,
                          activation_bytes_per_sample=1000.0, largest_block_param_bytes=4 * MB,
                          block_param_bytes=(2 * MB, 4 * MB, 1 * MB, 1 * MB), grad_tensor_bytes=(8 * MB,),
                          boundary_bytes_per_sample=100.0)
    compute = {2: Compute(step_s=0.050, data_s=0.001, fb_s=0.040, optimizer_s=0.009, copies=1),
               1: Compute(step_s=0.090, data_s=0.001, fb_s=0.080, optimizer_s=0.009, copies=2)}
    return Probe(workload="w", batch_size=32, device_type=device_type, cores=2, compute=compute,
                 footprint=footprint, link=Link(alpha_s=1e-4, busbw=1e9, nproc=2, source="test"),
                 block_s=block_s, block_micro_s=tuple(t / 3 for t in block_s), microbatch_size=8,
                 block_params=block_params)


def test_stages_are_cut_as_the_strategies_cut_them():
    # parameters (+1 per block) 2001, 4001, 1001, 1001: [conv1, conv2] | [fc1, fc2] is the lightest heaviest part
    assert stage_groups((2_000, 4_000, 1_000, 1_000), 2) == [[0, 1], [2, 3]]
    assert stage_groups((1, 1), 3) is None


def test_block_times_follow_the_measured_sizes_and_one_thread_where_timed():
    # Measured at 8 (the micro-batch), 16 (a halving) and 32 samples: each size in between lies on
    # the line through its two nearest, not on one line from 8 to 32; a stage of one thread uses
    # the blocks as timed on one thread, scaled by that curve's own whole batch.
    from dataclasses import replace

    from scaletrain.plan.stages import block_times_at, stage_costs

    p = replace(probe(), block_sizes_s=((16, (0.001, 0.001, 0.019, 0.001)),))
    assert block_times_at(p, 16) == [0.001, 0.001, 0.019, 0.001]
    assert block_times_at(p, 24) == pytest.approx([0.0025, 0.0025, 0.0195, 0.0025])
    assert block_times_at(p, 12)[2] == pytest.approx((0.020 / 3 + 0.019) / 2)
    assert block_times_at(p, 4)[2] == pytest.approx(0.020 / 3 - (0.019 - 0.020 / 3) / 2)
    one = ((8, (0.002, 0.002, 0.010, 0.002)), (32, (0.008, 0.008, 0.040, 0.008)))
    p1 = replace(p, block_one_thread_s=one)
    assert block_times_at(p1, 16, threads=1) == pytest.approx([0.004, 0.004, 0.020, 0.004])
    assert block_times_at(p1, 16, threads=2) == [0.001, 0.001, 0.019, 0.001]
    costs = stage_costs(p1, p1.compute[1], [[0, 1], [2, 3]], 2, threads=1)
    scale = 0.080 / 0.064  # one thread's whole step over the one-thread blocks' sum on 32 samples
    assert costs.per_microbatch_s == pytest.approx((0.008 * scale, 0.024 * scale))
    assert probe_from_dict(p1.as_dict()).block_one_thread_s == p1.block_one_thread_s


def test_pipeline_paces_at_the_slowest_stage_by_measured_time_not_parameters():
    p = probe()
    got = predict(p, "pipeline", 2, options(), {"microbatches": 4})
    # stage cost on one micro-batch: the blocks' micro-batch times scaled to 1 thread's forward+backward
    scale = 0.080 / sum(p.block_s)
    first, second = (0.004 + 0.004) / 3 * scale, (0.020 + 0.004) / 3 * scale
    optimizer = max(0.009 * 6 / 8, 0.009 * 2 / 8)  # each stage steps its share of the parameters
    busy = 0.001 + first + second + (4 - 1) * max(first, second) + optimizer
    size = 100.0 * 32 / 4
    # sends overlap the stages' compute: the first micro-batch's way down and the last one's way
    # back, and of the 3 others only what a transfer takes beyond the slowest stage (nothing here)
    one = size / 1e9 + 1e-4
    transfer = 2 * (2 - 1) * one + 3 * max(0.0, one - max(first, second))
    assert transfer == pytest.approx(2 * one)
    assert got.step_s == pytest.approx(busy + transfer)
    assert got.exposed_comm_s == pytest.approx(transfer)
    assert "stages" in got.note and "75%" in got.note  # the second stage does 3 of the 4 parts of the work
    # the same parameters with even block times: even stages, a faster pipeline
    even = predict(probe(block_s=(0.008, 0.008, 0.008, 0.008)), "pipeline", 2, options(), {"microbatches": 4})
    assert even.step_s < got.step_s


def test_ddp_comm_takes_each_bucket_at_the_bandwidth_of_its_size():
    p = probe()
    s = scenario(2, options(), p.link, "cpu")
    assert ddp_comm(p, s) == pytest.approx(f.ring_all_reduce_seconds(8 * MB, 2, 1e9, 1e-4))


def test_dp_on_a_cpu_is_one_process_and_on_gpus_splits_the_batch():
    cpu = predict(probe(), "dp", 1, options())
    one = predict(probe(), "single", 1, options())
    assert cpu.step_s == pytest.approx(one.step_s) and "one device" in cpu.note
    assert predict(probe(), "dp", 2, options()) is None  # one process only
    gpus = predict(probe(device_type="cuda"), "dp", 1, options(devices_per_process=4))
    moved = 8 * MB + 8 * MB
    comm = moved / 1e9 + 2 * 3 * 1e-4
    assert gpus.step_s == pytest.approx(0.001 + 0.040 / 4 + 0.009 + comm)
    assert gpus.global_batch == 32


def test_mp_on_a_cpu_runs_its_parts_in_turn():
    p = probe()
    got = predict(p, "mp", 1, options())
    # 2 parts, 1 micro-batch: both parts' whole-batch time (= the step's forward+backward), one after the other
    assert got.step_s == pytest.approx(0.001 + 0.040 + 0.009)  # one optimizer over both parts
    assert got.exposed_comm_s == 0.0 and "take turns" in got.note
    assert predict(p, "mp", 2, options()) is None


def test_hybrid_is_mp_per_process_plus_ddp_allreduce():
    p = probe()
    got = predict(p, "hybrid", 2, options())
    comm = f.ring_all_reduce_seconds(8 * MB, 2, 1e9, 1e-4)
    assert got.step_s == pytest.approx(0.001 + 0.080 + 0.009 + comm)
    assert got.global_batch == 64 and got.exposed_comm_s == pytest.approx(comm)


def test_a_recorded_probe_predicts_the_same_again():
    """bench.json keeps each round's probe as a dict; predictions made again from it are the
    ones made from the probe itself (benchmarks/plan_vs_bench.py --from relies on it)."""
    import json

    from scaletrain.plan.probe import probe_from_dict

    from dataclasses import replace

    from scaletrain.plan.probe import DdpStep

    p = replace(probe(), ddp_step=DdpStep(world_size=2, threads=1, step_s=0.100, local_step_s=0.090))
    again = probe_from_dict(json.loads(json.dumps(p.as_dict())))
    assert again == p
    for strategy, n in (("ddp", 2), ("pipeline", 2), ("fsdp", 2), ("mp", 1)):
        assert predict(again, strategy, n, options()) == predict(p, strategy, n, options())


def test_ddp_takes_the_probes_measured_communication_where_the_probe_ran_it():
    """On this machine's process count the exposed communication is the probe's real DDP
    steps' (all-reduce plus waiting); on more machines, the α/β model of the link."""
    from dataclasses import replace

    from scaletrain.plan.probe import DdpStep

    p = replace(probe(), ddp_step=DdpStep(world_size=2, threads=1, step_s=0.100, local_step_s=0.090))
    here = predict(p, "ddp", 2, options())
    assert here.exposed_comm_s == pytest.approx(0.010) and here.step_s == pytest.approx(0.100)
    assert here.comm_s == pytest.approx(f.ring_all_reduce_seconds(8 * MB, 2, 1e9, 1e-4))
    assert "measured in the probe's DDP steps" in here.note
    across = predict(p, "ddp", 4, options())  # two machines: the network's α/β
    assert across.exposed_comm_s == pytest.approx(across.comm_s) and "measured" not in across.note
    plain = predict(probe(), "ddp", 2, options())  # no DDP steps measured: the model
    assert plain.exposed_comm_s == pytest.approx(plain.comm_s)
    # Measured across the hosts too (plan --hosts: DDP steps on every slot of each host, here 2
    # machines of 2): that scenario takes them; one machine keeps its own.
    hosts = replace(p, network_ddp_step=DdpStep(world_size=4, threads=1, step_s=0.150, local_step_s=0.095))
    assert predict(hosts, "ddp", 4, options()).exposed_comm_s == pytest.approx(0.055)
    assert predict(hosts, "ddp", 2, options()).exposed_comm_s == pytest.approx(0.010)
    assert probe_from_dict(hosts.as_dict()) == hosts


def test_one_f_one_b_hides_fast_later_stages_and_matches_gpipe_when_the_last_is_slowest():
    from scaletrain.plan.stages import StageCosts

    # The last stage the slowest: 1F1B's critical path is GPipe's (fill, m at the slowest pace).
    last = StageCosts((0.004, 0.009), (0.0, 0.0))
    total, transfers = last.one_f_one_b(4, 0.001)
    assert abs(total - (last.busy_seconds(4) + 2 * 0.001)) < 1e-12 and abs(transfers - 0.002) < 1e-12
    # The first stage the slowest: the second's round trip (4 ms + 2 transfers) runs during the
    # first's warm-up forward (a third of 9 ms); only the 1 ms beyond it is waited for.
    first = StageCosts((0.009, 0.004), (0.0, 0.0))
    total, transfers = first.one_f_one_b(4, 0.0)
    assert abs(total - (4 * 0.009 + (0.004 - 0.003))) < 1e-12 and transfers == 0.0
    total, transfers = first.one_f_one_b(4, 0.001)
    assert abs(transfers - 0.002) < 1e-12  # the round trip's two transfers, no longer hidden


def test_a_later_stages_optimizer_step_overlaps_the_backwards_before_it():
    from scaletrain.plan.stages import StageCosts

    # stage 0: 30 ms a micro-batch (20 of it backward), a 1 ms step; stage 1: 6 ms, a 25 ms step
    costs = StageCosts(per_microbatch_s=(0.030, 0.006), optimizer_s=(0.001, 0.025))
    assert costs.optimizer_tail() == pytest.approx(0.025 - 0.020)
    assert costs.optimizer_tail(transfer_s=0.002) == pytest.approx(0.025 - 0.022)
    assert costs.optimizer_tail(share=0.5) == pytest.approx(0.0005)  # half of stage 1 hidden; half of stage 0 left


def test_every_parallelism_has_cost_terms_and_one_without_is_refused_in_one_line(monkeypatch):
    """A configuration's step is composed from the cost modules of the parallelisms it enables;
    one that enables a parallelism with no cost module is refused, never dropped."""
    from scaletrain.foundation.errors import UsageError
    from scaletrain.parallel import PARALLELISMS
    from scaletrain.plan import Candidates, Measuring, PlanRequest, Training, make_plan
    from scaletrain.plan.costs import NoCost, cost_terms

    for parallelism in PARALLELISMS:
        assert cost_terms(parallelism.name).parallelism == parallelism.name  # each registered its terms

    class Uncosted:
        name = "uncosted"

        def enabled(self, config):
            return True

    monkeypatch.setattr("scaletrain.plan.costs.registry.PARALLELISMS", [*PARALLELISMS, Uncosted()])
    with pytest.raises(NoCost):
        predict(probe(), "ddp", 2, options())
    request = PlanRequest(Training("synthetic-cnn"), options(), Candidates(("ddp",), (1, 2)),
                          Measuring(recorded=(probe(),)))
    with pytest.raises(UsageError) as refused:
        make_plan(request, say=lambda text: None)
    assert "uncosted" in str(refused.value) and "\n" not in str(refused.value)
