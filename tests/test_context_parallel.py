"""Context parallel: the load-balanced split, the refusals, checkpoints that move between
cp 1 and cp 2, bf16 with compiled and recomputed blocks (the equality of cp and its compositions with one process is in
test_compositions.py; the ring itself is checked against torch's attention in
tests/workers/ring_check.py, launched here)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from scaletrain.checkpoint import load_state
from scaletrain.foundation.errors import UsageError
from scaletrain.parallel.sequence_split import SequenceSplit, check_length, shifted_labels
from tests.helpers import REPO, run, torchrun

WORKERS = REPO / "tests" / "workers"


def test_the_split_gives_each_process_an_early_chunk_and_its_mirror():
    parts = [SequenceSplit(8, i, 2).positions().tolist() for i in range(2)]
    assert parts == [[0, 1, 6, 7], [2, 3, 4, 5]]
    parts = [SequenceSplit(16, i, 4).positions().tolist() for i in range(4)]
    assert parts[0] == [0, 1, 14, 15] and parts[3] == [6, 7, 8, 9]
    assert sorted(sum(parts, [])) == list(range(16))  # every position held once
    whole = torch.arange(32).view(2, 16)
    split = SequenceSplit(16, 0, 4)
    pieces = [SequenceSplit(16, i, 4).part(whole) for i in range(4)]
    assert torch.equal(split.whole(pieces), whole)


def test_labels_are_shifted_before_the_split():
    labels = torch.tensor([[10, 11, 12, 13]])
    assert shifted_labels(labels).tolist() == [[11, 12, 13, -100]]
    # Process 0 holds positions 0 and 3: position 0 predicts token 1, which process 1 holds.
    assert SequenceSplit(4, 0, 2).part(shifted_labels(labels)).tolist() == [[11, -100]]


def test_a_sequence_the_split_cannot_cut_is_refused_in_one_line():
    with pytest.raises(UsageError) as err:
        check_length(100, 4, seq_len_flag=True)  # a built-in language model's length: --seq-len sets it
    message = str(err.value)
    assert "2 × cp = 8" in message and "100 tokens" in message and "--seq-len 96" in message.replace("seq_len=", "--seq-len ")
    assert "\n" not in message
    # The data's own sequences (a --dataset): --seq-len does not apply to them, so it is not suggested.
    with pytest.raises(UsageError) as err:
        SequenceSplit(100, 0, 4)
    message = str(err.value)
    assert "seq_len" not in message and "pad or cut the data's sequences to a multiple of 8 tokens (e.g. 96)" in message


def test_strategies_that_cannot_split_sequences_refuse_cp():
    import scaletrain.strategies as strategies

    with pytest.raises(UsageError, match="does not apply to strategy='ddp'; use strategy='fsdp' or tp"):
        strategies.get_strategy("ddp", cp=2)
    with pytest.raises(UsageError, match="does not compose with"):
        strategies.get_strategy("pipeline", cp=2, pp=2).check_world_size(4)
    assert strategies.implied_strategy({"cp": 2}) == "fsdp"
    dims = strategies.get_strategy("fsdp", cp=2).dims(8)
    assert (dims.dp_shard, dims.cp, dims.dp_size) == (4, 2, 4)
    assert dims.coordinates(3) == {"pp": 0, "dp_replicate": 0, "dp_shard": 1, "cp": 1, "tp": 0, "ep": 0}
    with pytest.raises(UsageError, match="cp=3"):
        strategies.get_strategy("tp", cp=3, tp=2).dims(4)


@pytest.mark.timeout(200)
def test_the_ring_matches_torch_attention():
    done = torchrun(WORKERS / "ring_check.py", nproc=4, timeout=150)  # cp 4: keys and gradients make 3 hops
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("RING ")]
    assert len(rows) == 8, done.stdout
    for row in rows:
        tolerance = 1e-5 if row["dtype"] == "float32" else 3e-2
        assert max(row["errors"].values()) < tolerance, row


def _final(folder):
    state = load_state(sorted(folder.glob("step-*"))[-1] / "state.pt")
    return state["model"], {k: v for k, v in state["optimizer"].items() if isinstance(v, torch.Tensor)}


def _assert_close(a, b, what):
    (model_a, opt_a), (model_b, opt_b) = _final(a), _final(b)
    assert model_a.keys() == model_b.keys() and model_a, what
    for key in model_a:
        assert torch.allclose(model_a[key], model_b[key], atol=1e-5, rtol=0), f"{what}: {key}"
    for key in opt_a:
        assert torch.allclose(opt_a[key], opt_b[key], atol=1e-5, rtol=0), f"{what}: optimizer {key}"


@pytest.mark.timeout(400)
def test_checkpoints_move_between_cp_1_and_cp_2(tmp_path):
    worker = str(WORKERS / "cp_resume.py")
    run([sys.executable, worker, "cp1", "first", str(tmp_path)], timeout=120, check=True)
    done = torchrun(worker, "cp2", "second", str(tmp_path), nproc=2, timeout=300, check=True)
    run([sys.executable, worker, "cp1", "third", str(tmp_path)], timeout=120, check=True)
    reference = tmp_path / "cp1" / "uninterrupted"
    _assert_close(reference, tmp_path / "cp2" / "uninterrupted", "cp 2 uninterrupted")
    for kind in ("full", "sharded"):
        _assert_close(reference, tmp_path / "cp2" / kind / "resumed", f"cp 2 resumed from cp 1's {kind} checkpoint")
        _assert_close(reference, tmp_path / "cp1" / kind / "resumed", f"cp 1 resumed from cp 2's {kind} checkpoint")
    # The same job, in bf16 with compiled, recomputed blocks: its loss near fp32's.
    losses = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("MIXED ")).split(" ", 1)[1])
    assert 0 < abs(losses["bf16"] - losses["fp32"]) < 0.05, losses


def test_the_plan_costs_context_parallel_by_its_terms():
    """cp 2 on two processes: half of forward and backward each, the ring's arithmetic as the
    probe timed it, its hops at the link's cost (CPUs hide none), activations ÷ 2."""
    from dataclasses import replace

    from scaletrain.plan.predict import predict
    from scaletrain.plan.probe import probe_from_dict
    from tests.test_measure_cost_models import MB, options, probe

    base = probe()
    p = replace(base, footprint=replace(base.footprint, attention_kv_bytes_per_sample=(1 * MB, 1 * MB),
                                        attention_sequence=64),
                attention_fraction=0.5, ring_ratio={2: 1.2})
    plain, cp2 = predict(p, "fsdp", 2, options()), predict(p, "fsdp", 2, options(), {"cp": 2})
    assert cp2.global_batch == plain.global_batch // 2  # the pair reads one batch
    c = p.compute[1]
    assert cp2.compute_s == pytest.approx(plain.compute_s - c.fb_s / 2 + c.fb_s * 0.5 * 0.2 / 2)
    piece = 1 * MB * 32 / 2  # a 1/cp piece of one attention's keys and values, for the batch
    hop = piece / p.link.busbw_for(piece) + p.link.alpha_s
    assert cp2.comm_s - plain.comm_s == pytest.approx(2 * (1 * 2 + 2) * hop, rel=0.05)
    assert cp2.exposed_comm_s - plain.exposed_comm_s == pytest.approx(cp2.comm_s - plain.comm_s)
    assert cp2.memory_bytes == pytest.approx(plain.memory_bytes - 1000.0 * 32 / 2)
    # Recorded and read back (bench.json keeps every round's probe): the same prediction.
    assert predict(probe_from_dict(p.as_dict()), "fsdp", 2, options(), {"cp": 2}) == cp2
