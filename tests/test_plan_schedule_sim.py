"""The 1F1B step played out with transfers that wait for their receiver (plan/schedule_sim.py)."""

import pytest

from scaletrain.plan.schedule_sim import one_f_one_b_seconds


def test_without_transfers_even_stages_take_m_plus_p_minus_one_micro_batches():
    # 2 stages of 1 ms forward + 2 ms backward, 4 micro-batches: (4 + 2 - 1) × 3 ms
    assert one_f_one_b_seconds([1.0, 1.0], [2.0, 2.0], 4, [0.0], 0.0) == pytest.approx(15.0)
    assert one_f_one_b_seconds([1.0] * 4, [2.0] * 4, 8, [0.0] * 3, 0.0) == pytest.approx(33.0)


def test_a_transfer_starts_when_its_receiver_posts_the_receive():
    # One micro-batch, latency 5, data 1. Stage 1 posts its receive at 0: the activations
    # arrive at max(1, 0 + 5) + 5 + 1 = 11; it runs 11–14. Stage 0 posted its receive for the
    # gradients after its forward (at 1): they arrive at max(14, 1 + 5) + 5 + 1 = 20; its
    # backward runs 20–22.
    assert one_f_one_b_seconds([1.0, 1.0], [2.0, 2.0], 1, [5.0], 1.0) == pytest.approx(22.0)


def test_across_machines_a_pipeline_waits_for_what_the_closed_form_counts_once():
    from scaletrain.plan.stages import StageCosts

    costs = StageCosts(per_microbatch_s=(0.011, 0.0064), optimizer_s=(0.001, 0.001))
    # 2 ms each way (the probe's α: 4.6 ms a ring step) and 2.4 ms of data per micro-batch
    waited = costs.waited_transfers(2, [0.0046], 0.0024)
    _, counted = costs.one_f_one_b(2, 0.0046 + 0.0024)
    assert waited > counted * 1.5
    assert costs.waited_transfers(2, [0.0], 0.0) == 0.0
