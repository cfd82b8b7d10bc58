"""The probe's measurements of the machinery's own cost (plan/overheads.py), in a process of one:
FSDP's and tensor parallel's steps are real steps of the prepared model, and a model without a
tensor-parallel plan gets no figure rather than a failed probe."""

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, torch, torch.distributed as dist
    from scaletrain.plan.overheads import fsdp_step_seconds, tp_step_seconds
    from scaletrain.workloads import get_workload

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.set_num_threads(1)
    figures = {}
    for name in ("stdlib-gpt", "synthetic-mlp"):
        w = get_workload(name, None, None)
        train, _ = w.build_datasets(0)
        loss_fn = w.training_task(train[0]).loss_fn
        loader = torch.utils.data.DataLoader(train, batch_size=8, shuffle=True, drop_last=True)
        def forever():
            while True:
                yield from loader
        cpu = torch.device("cpu")
        figures[name] = {"fsdp": fsdp_step_seconds(w.build_model, w.lr, forever(), loss_fn, cpu, 3, 1),
                         "tp": tp_step_seconds(w.build_model, w.lr, forever(), loss_fn, cpu, 3, 1)}
    dist.destroy_process_group()
    print(json.dumps(figures))
""")


def test_prepared_steps_are_timed_where_the_model_allows_them():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    gpt, mlp = figures["stdlib-gpt"], figures["synthetic-mlp"]
    # The GPT has a tensor-parallel plan: its DTensor step (mixed DTensors and plain tensors,
    # stepped by the optimizer the strategies retarget) runs and takes time; FSDP shards both.
    assert gpt["tp"] > 0 and gpt["fsdp"] > 0 and mlp["fsdp"] > 0
    assert mlp["tp"] is None  # no plan: no figure, not a failed probe


def test_machinery_costs_add_to_the_configurations_that_use_them():
    # tensor parallel's DTensor dispatch on every tp configuration (for the stage's share of the
    # model, however many ways it splits), FSDP's copies on every FSDP configuration (for the
    # share held), neither on ddp; and a probe's all-gather and reduce-scatter measured slower
    # than a ring's make FSDP's communication slower by as much.
    from dataclasses import replace

    from scaletrain.plan.predict import predict

    from .test_measure_cost_models import probe
    from .test_measure_formulas import _options as options

    base = probe()
    base = replace(base, footprint=replace(base.footprint, block_tp_param_bytes=(0, 4_000_000, 0, 0),
                                           block_tp_reduce_bytes_per_sample=(0.0, 100.0, 0.0, 0.0)))
    costly = replace(base, tp_overhead_s=0.010, fsdp_overhead_s=0.004)
    tp = {"tp": 2}
    assert predict(costly, "tp", 2, options(), tp).compute_s == pytest.approx(
        predict(base, "tp", 2, options(), tp).compute_s + 0.010)
    assert predict(costly, "ddp", 2, options()).step_s == predict(base, "ddp", 2, options()).step_s
    assert predict(costly, "fsdp", 2, options()).compute_s > predict(base, "fsdp", 2, options()).compute_s
    slow = replace(base, link=replace(base.link, gather_ratio=2.0, scatter_ratio=3.0))
    # two gathers and one reduce-scatter of equal bytes per block: (2 × 2 + 3) ÷ 3 the ring's time
    assert predict(slow, "fsdp", 2, options()).comm_s == pytest.approx(7 / 3 * predict(base, "fsdp", 2, options()).comm_s)


def test_a_choice_keeps_the_memory_predictions_room_below_the_budget(monkeypatch):
    # The fastest candidate predicted inside the room the memory prediction can miss by is passed
    # over for the fastest that leaves it; with none leaving it, the one with the most speed to
    # expect (its speed × the chance its peak fits) is taken and the choice says it is tight. Processes that keep their memory steady get half the room.
    from dataclasses import replace

    from scaletrain.plan.choose import MEMORY_ROOM, MEMORY_ROOM_STEADY, choose, fit_odds, memory_room
    from scaletrain.memory.steady import STEADY_MEMORY_VAR

    monkeypatch.delenv(STEADY_MEMORY_VAR, raising=False)

    from .test_measure_cost_models import probe
    from .test_measure_formulas import _options as options

    base = probe()
    base = replace(base, footprint=replace(base.footprint, checkpointed_activation_bytes_per_sample={"full": 100.0}))
    unlimited = choose([base], 2, 32, options())
    by_speed = [p for p in unlimited.candidates]
    fastest = by_speed[0]
    leaner = min((p for p in by_speed if p.memory_bytes < fastest.memory_bytes * 0.85), key=lambda p: -p.samples_per_s)
    budget = fastest.memory_bytes * 1.02  # the fastest fits, inside the room
    chosen = choose([base], 2, 32, options(device_memory_bytes=budget))
    assert leaner.memory_bytes <= budget * (1 - MEMORY_ROOM)
    assert (chosen.chosen.strategy, chosen.chosen.options) != (fastest.strategy, fastest.options)
    assert chosen.chosen.memory_bytes <= budget * (1 - MEMORY_ROOM) and not chosen.tight
    tight_budget = min(p.memory_bytes for p in by_speed) * 1.02
    tight = choose([base], 2, 32, options(device_memory_bytes=tight_budget))
    assert tight.tight and "Tight" in tight.lines()[0] and "10%" in tight.lines()[0]
    # With none leaving the room, the speed to expect decides: a candidate at the budget's edge
    # fits about half the time; one further below it more often.
    assert fit_odds(100.0, 100.0, 0.10) == pytest.approx(0.5)
    assert fit_odds(95.0, 100.0, 0.10) > 0.8 and fit_odds(89.0, 100.0, 0.10) == 1.0
    expected = lambda p: p.samples_per_s * fit_odds(p.memory_bytes, tight_budget, MEMORY_ROOM)  # noqa: E731
    fitting = [p for p in tight.candidates if p.memory_bytes <= tight_budget]
    assert expected(tight.chosen) == max(expected(p) for p in fitting)
    assert tight.odds == pytest.approx(fit_odds(tight.chosen.memory_bytes, tight_budget, MEMORY_ROOM))
    monkeypatch.setenv(STEADY_MEMORY_VAR, "1")
    assert memory_room("cpu") == MEMORY_ROOM_STEADY < MEMORY_ROOM
    assert choose([base], 2, 32, options(device_memory_bytes=tight_budget)).room == MEMORY_ROOM_STEADY


@pytest.mark.parametrize("cores", ["all", "one"])
def test_a_real_tensor_parallel_step_sets_what_tensor_parallel_adds(cores):
    """The probe's job of two processes times a tensor-parallel step across both (each fed the
    same batch); the plan's tp ×2 on this machine then predicts that step, and the machinery it
    adds is what the step took beyond the arithmetic's share and the all-reduces. On one core
    (a host of the two-host test bed) every other job has one process: a job of its own times
    the step on two processes sharing the core."""
    pin = ["taskset", "-c", "0"] if cores == "one" else []
    done = subprocess.run([*pin, sys.executable, "-m", "scaletrain", "plan", "--workload", "stdlib-gpt",
                           "--batch-size", "16", "--strategy", "tp,ddp", "--world-sizes", "2", "--nproc-per-node", "2",
                           "--steps", "3", "--warmup", "1", "--probe-rounds", "1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    measured = doc["probe"]["tp_step"]
    assert measured["world_size"] == 2 and measured["step_s"] > 0
    tp2 = next(p for p in doc["predictions"] if p["strategy"] == "tp" and p["world_size"] == 2)
    assert tp2["step_s"] >= measured["step_s"] * 0.999


def test_the_measured_tensor_parallel_step_replaces_the_mesh_of_one_figure():
    from dataclasses import replace

    from scaletrain.plan.costs.tensor_parallel import machinery_seconds as tp_machinery_seconds
    from scaletrain.plan.predict import predict
    from scaletrain.plan.probe import MeshStep, probe_from_dict

    from .test_measure_cost_models import probe
    from .test_measure_formulas import _options as options

    base = probe()
    base = replace(base, footprint=replace(base.footprint, block_tp_param_bytes=(0, 4_000_000, 0, 0),
                                           block_tp_reduce_bytes_per_sample=(0.0, 100.0, 0.0, 0.0)),
                   tp_overhead_s=0.010)
    plain = predict(replace(base, tp_overhead_s=0.0), "tp", 2, options(nproc_per_node=2), {"tp": 2})
    slow = replace(base, tp_step=MeshStep(world_size=2, threads=1, step_s=plain.step_s + 0.030))
    assert tp_machinery_seconds(base) == 0.010      # nothing measured across processes: one process's figure
    assert tp_machinery_seconds(slow) == pytest.approx(0.030)
    assert predict(slow, "tp", 2, options(nproc_per_node=2), {"tp": 2}).step_s == pytest.approx(plain.step_s + 0.030)
    assert probe_from_dict(slow.as_dict()).tp_step == slow.tp_step


def test_the_measured_fsdp_step_across_the_hosts_is_added_for_the_bytes_gathered_across_them():
    # An FSDP step across two hosts that took 40 ms more than the model's prediction: fsdp ×2
    # across them is predicted at that step; FSDP × TP (tensor parallel inside the hosts)
    # gathers half as many bytes across them per process, so gets its share of the 40 ms; a
    # configuration on one machine gets none of it.
    from dataclasses import replace

    from scaletrain.plan.costs.data_parallel import fsdp_network_seconds
    from scaletrain.plan.predict import predict
    from scaletrain.plan.probe import MeshStep, probe_from_dict
    from scaletrain.plan.probe_link import Link

    from .test_measure_cost_models import probe
    from .test_measure_formulas import _options as options

    base = replace(probe(), network=Link(alpha_s=3e-4, busbw=1e8, nproc=2, source="between the hosts"))
    base = replace(base, footprint=replace(base.footprint, block_tp_param_bytes=(0, 4_000_000, 0, 0),
                                           block_tp_reduce_bytes_per_sample=(0.0, 100.0, 0.0, 0.0)))
    across = options(nproc_per_node=1, cores=2)
    plain = predict(base, "fsdp", 2, across)
    measured = replace(base, network_fsdp_step=MeshStep(world_size=2, threads=2, step_s=plain.step_s + 0.040,
                                                        nproc_per_node=1))
    assert fsdp_network_seconds(base) == 0.0
    assert fsdp_network_seconds(measured) * base.footprint.param_bytes / 2 == pytest.approx(0.040)
    assert predict(measured, "fsdp", 2, across).step_s == pytest.approx(plain.step_s + 0.040)
    hosts_of_two = options(nproc_per_node=2)
    composed = {"tp": 2, "dp_shard": 2}
    before = predict(base, "fsdp", 4, hosts_of_two, composed)
    after = predict(measured, "fsdp", 4, hosts_of_two, composed)
    held = (base.footprint.param_bytes - 4_000_000 / 2) / base.footprint.param_bytes  # tensor parallel's share
    assert after.step_s - before.step_s == pytest.approx(0.080 * held / 2)
    assert predict(measured, "fsdp", 2, options()).step_s == pytest.approx(predict(base, "fsdp", 2, options()).step_s)
    assert probe_from_dict(measured.as_dict()).network_fsdp_step == measured.network_fsdp_step
