"""The timed step loop and the model footprint, in this process (one rank, no launcher)."""

import torch
import torch.nn.functional as F

import scaletrain
from scaletrain.measure.clock import Clock
from scaletrain.measure.footprint import measure_footprint
from scaletrain.measure.steps import SYNC, breakdown, forever, timed_steps
from scaletrain.workloads import get_workload


def test_timed_steps_train_and_break_each_step_down():
    workload = get_workload("digits-mlp")
    with scaletrain.init(strategy="single", threads=1, environ={}) as run:
        train, _ = workload.build_datasets(0)
        model = workload.build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model, optimizer = run.setup(model, optimizer)
        before = [p.detach().clone() for p in model.parameters()]
        batches = forever(run.loader(train, batch_size=16))
        clock = Clock(run.device)
        timed_steps(run, model, optimizer, batches, F.cross_entropy, [SYNC] * 6, clock)
        parts = breakdown(clock, skip=2)
        assert parts["measured_steps"] == 4 and parts["nosync_steps"] == 0
        assert parts["exposed_comm_s"] == 0.0
        for key in ("step_s", "compute_s", "data_s", "optimizer_s"):
            assert parts[key] > 0
        assert parts["step_s"] >= parts["compute_s"]
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained

        inputs, targets = next(batches)
        fp = measure_footprint(model, optimizer, inputs, targets, F.cross_entropy)
        n_params = sum(p.numel() for p in model.parameters())
        assert fp.param_bytes == fp.grad_bytes == 4 * n_params
        assert fp.optimizer_bytes >= 2 * 4 * n_params  # Adam: two moments per parameter (+ step counters)
        assert sum(fp.grad_tensor_bytes) == fp.grad_bytes
        assert fp.block_param_bytes == tuple(4 * sum(p.numel() for p in b.parameters()) for b in model.children())
        assert fp.boundary_bytes_per_sample == 256 * 4  # fc1..fc3 each output 256 floats per sample
        assert fp.activation_bytes_per_sample > 0


def test_short_steps_are_measured_for_long_enough():
    from scaletrain.measure.steps import steps_to_measure

    workload = get_workload("digits-mlp")
    with scaletrain.init(strategy="single", threads=1, environ={}) as run:
        train, _ = workload.build_datasets(0)
        model = workload.build_model()
        model, optimizer = run.setup(model, torch.optim.Adam(model.parameters()))
        clock = Clock(run.device)
        timed_steps(run, model, optimizer, forever(run.loader(train, batch_size=16)), F.cross_entropy, [SYNC] * 6,
                    clock)
        pace = sorted(clock.step_walls(SYNC)[3:])[1]  # the median of the later warm-up steps
        assert steps_to_measure(run, clock, SYNC, 4, 0.0) == 4
        wanted = steps_to_measure(run, clock, SYNC, 4, 1000 * pace)
        assert 999 <= wanted <= 1001
        assert steps_to_measure(run, clock, SYNC, 5000, 1000 * pace) == 5000
