"""Expert parallel and mixtures of experts: ep 2, fsdp 4 × ep 2, HSDP × ep and TP × ep equal
one process step by step (the built-in stdlib-moe, a Hugging Face Mixtral and Qwen3-MoE;
parameters within 1e-5 after 3 optimizer steps, every step's loss, and the same tokens per
expert at every step: the same routing), built whole or on the meta device; a checkpoint
written at ep 2 resumes at ep 1 and ends where the uninterrupted run ends; `--ep` that does not
divide the experts, given a dense model, or to the cluster planner is one line before anything
starts; `scaletrain train --workload stdlib-moe --ep 2` trains from the command line and its
records, summary.json and `scaletrain report` show the tokens each expert received (blocks
recomputed under activation checkpointing not counted twice); the borrowed dimension's layout
and the planner's terms as pure values; a Hugging Face MoE from its config keeps its balance
loss."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
import torch

from scaletrain.checkpoint import load_state
from scaletrain.foundation.errors import UsageError
from scaletrain.parallel.dims import ParallelDims, resolve_dims
from tests.helpers import REPO, in_process, run, scaletrain, torchrun

WORKERS = REPO / "tests" / "workers"
ATOL = 1e-5


def _results(done) -> list[dict]:
    assert done.returncode == 0, f"worker failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    return [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]


def _final(folder) -> dict:
    state = load_state(sorted(folder.glob("step-*"))[-1] / "state.pt")
    return {**{f"model.{k}": v for k, v in state["model"].items()},
            **{f"optimizer.{k}": v for k, v in state["optimizer"].items() if isinstance(v, torch.Tensor)}}


@pytest.mark.timeout(900)
def test_expert_parallel_equals_one_process_and_resumes_at_ep_1(tmp_path):
    worker = WORKERS / "expert_equivalence.py"
    jobs = [torchrun(worker, str(tmp_path), nproc=2, timeout=400),
            torchrun(worker, str(tmp_path / "four"), nproc=4, timeout=400)]
    found = [r for done in jobs for r in _results(done)]
    meta = [json.loads(line.split(" ", 1)[1]) for done in jobs for line in done.stdout.splitlines()
            if line.startswith("META ")]
    assert meta == [{"world": 2, "same_start": True}, {"world": 4, "same_start": True}], meta
    run([sys.executable, str(worker), str(tmp_path), "resume"], timeout=200, check=True)
    cases = {(r["mesh"], r["model"]) for r in found}
    assert cases == {("dp_shard 2 with ep 2", m) for m in ("stdlib-moe", "mixtral", "qwen3-moe")} | \
        {("dp_shard 4 with ep 2", m) for m in ("stdlib-moe", "mixtral")} | \
        {("dp_replicate 2 × dp_shard 2 with ep 2", "stdlib-moe"), ("dp_shard 2 × tp 2 with ep 2", "stdlib-moe")}, cases
    for r in found:
        assert r["param_diff"] < ATOL and max(r["loss_diffs"]) < ATOL, r
        assert r["same_routing"], r  # every step, the same tokens per expert as one process
        assert r["experts_held"]["ep"] == 2 and r["experts_held"]["experts_per_process"] == "2", r
        assert all(sum(map(sum, step)) > 0 for step in r["counts"]), r
    uninterrupted = _final(tmp_path / "uninterrupted")
    for layout in ("full", "sharded"):  # written at ep 2 over two processes, resumed by one at ep 1
        resumed = _final(tmp_path / layout / "resumed")
        assert resumed.keys() == uninterrupted.keys() and "model.1.moe.experts.gate_up_proj" in resumed
        for key, value in uninterrupted.items():
            assert torch.allclose(value, resumed[key], rtol=0, atol=ATOL), f"{layout}: {key}"


def _mixtral_config(tmp_path, experts: int):
    config = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": 64, "hidden_size": 32,
              "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_local_experts": experts, "num_experts_per_tok": 2, "max_position_embeddings": 64}
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(config))
    return path


def test_ep_that_cannot_split_is_refused_in_one_line_before_anything_starts(tmp_path, capsys):
    """In this process: each is refused by the command's checks before any process starts."""
    config = _mixtral_config(tmp_path, experts=4)
    code, lines, err = _command(capsys, "train", "--model-config", str(config), "--seq-len", "16", "--ep", "3",
                                "--nproc-per-node", "3", "--max-steps", "1", "--out", str(tmp_path / "three"))
    assert code == 2, err
    assert len(lines) == 1 and "holds 4 experts, which do not split into 3 equal groups" in lines[0], err
    assert "--ep 2" in lines[0] and "Traceback" not in err and not (tmp_path / "three").exists()
    code, lines, err = _command(capsys, "train", "--workload", "stdlib-gpt", "--ep", "2", "--nproc-per-node", "2",
                                "--max-steps", "1", "--out", str(tmp_path / "dense"))
    assert code == 2 and len(lines) == 1 and "has none" in lines[0], err
    assert "drop --ep" in lines[0] and "Traceback" not in err and not (tmp_path / "dense").exists()
    code, lines, err = _command(capsys, "plan", "--hardware", "h100-sxm-80g", "--model-config", "llama3-8b", "--gpus",
                                "8", "--ep", "2")
    assert code == 2 and len(lines) == 1 and "is a dense model" in lines[0] and "drop --ep" in lines[0], err


def _command(capsys, *argv: str) -> tuple[int, list[str], str]:
    """The command line run in this process: its exit status, its own lines on stderr (importing
    transformers may print torchao's notes first), stderr."""
    code, _out, err = in_process(capsys, *argv)
    return code, [line for line in err.splitlines() if line.startswith("scaletrain")], err


@pytest.mark.timeout(400)
def test_the_built_in_moe_trains_with_ep_from_the_command_line(tmp_path):
    out = tmp_path / "run"
    # Blocks computed again in backward dispatch again: their tokens are not counted twice.
    done = scaletrain("train", "--workload", "stdlib-moe", "--ep", "2", "--nproc-per-node", "2", "--seq-len", "32",
                      "--batch-size", "8", "--max-steps", "3", "--log-every-steps", "1", "--activation-checkpointing",
                      "full", "--out", str(out), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "expert parallel: 2 mixture-of-experts layer(s), 8 experts split 2 ways" in done.stdout
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for record in steps:  # the global batch's token choices: 2 processes × 8 sequences × 32 tokens × top-2
        assert [sum(layer) for layer in record["expert_tokens"]] == [1024, 1024], record
    assert "experts " in done.stdout and "max/mean" in done.stdout  # the step line, compactly
    summary = json.loads((out / "summary.json").read_text())
    assert [sum(layer) for layer in summary["expert_tokens_total"]] == [3072, 3072]
    assert summary["expert_load_max_over_mean"] >= 1.0 and summary["mesh"] == "dp_shard 2 with ep 2"
    report = scaletrain("report", str(out), "--out", str(tmp_path / "report"), timeout=120)
    assert report.returncode == 0, report.stderr
    assert "tokens per expert per step" in report.stdout and "layer 1:" in report.stdout
    assert "max/mean" in (tmp_path / "report" / "comparison.md").read_text()


def test_ep_borrows_the_data_parallel_processes():
    dims = resolve_dims(8, {"ep": 2, "tp": 2}, "dp_shard")
    assert dims == ParallelDims(dp_shard=4, ep=2, tp=2) and dims.world_size == 8
    assert [dims.coordinates(r)["ep"] for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]  # neighbours, tp inside
    assert [dims.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]  # ep peers read different batches
    assert dims.describe() == "dp_shard 4 × tp 2 with ep 2" and dims.span("ep") == 4
    with_cp = ParallelDims(dp_shard=2, cp=2, ep=4)
    assert [with_cp.coordinates(r)["ep"] for r in range(4)] == [0, 1, 2, 3] and with_cp.world_size == 4
    with pytest.raises(UsageError) as refused:
        resolve_dims(4, {"ep": 3}, "dp_shard")
    assert "must divide 4; use ep=2 or ep=4" in str(refused.value) and "\n" not in str(refused.value)
    import scaletrain.strategies as strategies

    with pytest.raises(UsageError, match="ep=2 does not apply to strategy='ddp'"):
        strategies.get_strategy("ddp", ep=2)
    with pytest.raises(UsageError, match="ep=2 does not compose with strategy='pipeline'"):
        strategies.get_strategy("pipeline", ep=2, pp=2, dp_shard=2).check_world_size(4)
    assert strategies.implied_strategy({"ep": 2}) == "fsdp"


def test_a_mixture_of_experts_from_a_config_keeps_its_balance_loss(tmp_path):
    from scaletrain.workloads.model_config import model_config_workload

    config = _mixtral_config(tmp_path, experts=4)
    workload = model_config_workload(str(config), 16)
    model = workload.build_model()
    batch = workload.build_datasets(0)[0][0]
    out = model(input_ids=batch["input_ids"][None], labels=batch["labels"][None])
    assert out.aux_loss is not None and out.aux_loss > 0  # output_router_logits on: the loss includes it


def test_the_plan_costs_expert_parallel_by_its_terms():
    """fsdp ep 2 on two processes against fsdp: the all-to-alls at the probe's measured
    all-to-all, the dispatch's bookkeeping, the busiest group's share of the experts, less the
    experts' FSDP gathers that no longer happen; a dense model cannot run so."""
    from scaletrain.plan import formulas as f
    from scaletrain.plan.predict import predict
    from scaletrain.plan.probe import probe_from_dict
    from scaletrain.plan.probe_experts import ExpertFacts
    from tests.test_measure_cost_models import MB, options, probe

    base = probe()
    facts = ExpertFacts(layers=2, experts=4, top_k=2, width=64, tokens_per_sample=16, element_bytes=4,
                        param_bytes=2 * MB, flop_share=0.4, counts=((30, 10, 10, 30), (20, 20, 20, 20)),
                        dispatch_s=0.002, all_to_all=((4096, 1e-4), (1 << 20, 6e-4)), all_to_all_world=2)
    p = replace(base, facts={"expert_parallel": {"alone": facts.as_dict(), "job": None}})
    plain, ep2 = predict(p, "fsdp", 2, options()), predict(p, "fsdp", 2, options(), {"ep": 2})
    assert predict(base, "fsdp", 2, options(), {"ep": 2}) is None  # a dense model has no experts to split
    assert ep2.global_batch == plain.global_batch and ep2.mesh == "dp_shard 2 with ep 2"
    alpha, busbw = facts.link()
    tokens = p.batch_size * 16
    a2a = f.expert_parallel_seconds(tokens, 2, 64, 4, 2, 2, busbw, alpha)
    assert a2a == pytest.approx(2 * (4 * f.all_to_all_seconds(tokens * 2 * 64 * 4, 2, busbw, alpha) + alpha))
    c = p.compute[1]
    imbalance = 0.4 * c.fb_s * ((1.0 + 1.0) / 2 - 1)  # layer 0's groups 40/40, layer 1's 40/40: balanced
    assert ep2.compute_s - plain.compute_s == pytest.approx(0.002 + imbalance)
    # Each process's 2 experts are its own (ep 2 of 2 processes): FSDP gathers none of them.
    saved = f.fsdp_comm_seconds(2 * MB, 2 * MB, 2, 2, p.link.busbw, p.link.alpha_s)
    assert ep2.exposed_comm_s - plain.exposed_comm_s == pytest.approx(a2a - saved)
    assert ep2.memory_bytes - plain.memory_bytes == pytest.approx(3 * tokens * 2 * 64 * 4 * 2)  # rows kept
    assert predict(probe_from_dict(p.as_dict()), "fsdp", 2, options(), {"ep": 2}) == ep2
    # Where the probe's job ran a real ep 2 step on its 2 processes, what it took beyond these terms
    # is the machinery: the step predicted for that configuration is the one measured.
    stepped = replace(facts, mesh_step_s=0.2, mesh_world=2, mesh_threads=ep2.threads)
    measured = replace(p, facts={"expert_parallel": {"alone": stepped.as_dict(), "job": None}})
    assert predict(measured, "fsdp", 2, options(), {"ep": 2}).step_s == pytest.approx(0.2)
    assert predict(measured, "fsdp", 2, options(), {"ep": 2, "activation_checkpointing": "full"}).step_s > 0.2
