"""Planning a mixture of experts on a GPU cluster (`scaletrain plan --hardware` with a Mixtral
shape), each term against the figure it stands for (no GPU, no process started):

- Mixtral 8×7B on 16 H100s: a configuration with expert parallel chosen, its all-to-alls in
  its step, its command one `train` runs (pipeline and tensor parallel rows of a mixture
  labelled as train refuses them);
- the all-to-all's term: the shared formula at the ep group's link (NVLink in a node, the
  GPUs' own ports across nodes), none of it hidden; the busiest GPU's excess with
  `--expert-load`; the experts' memory ÷ ep;
- `--ep` that cannot split the experts, `--ep` on a dense model and a bad `--expert-load`
  refused in one line each.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from scaletrain.hardware import load_profile
from scaletrain.parallel.dims import ParallelDims
from scaletrain.plan import formulas
from scaletrain.plan.cluster.comm import Network, group
from scaletrain.plan.cluster.config import ClusterConfig, ClusterScenario
from scaletrain.plan.cluster.step import predict
from scaletrain.workloads.model_shapes import BUILTIN
from tests.test_cluster_choices import _train_checks
from tests.test_cluster_plan import _plan

MIXTRAL = BUILTIN["mixtral-8x7b"]


def _scenario(gpus: int = 16) -> ClusterScenario:
    return ClusterScenario(MIXTRAL, load_profile("h100-sxm-80g"), gpus, 8, 4096, 64)


def _config(ep: int, shard: int = 16, **options) -> ClusterConfig:
    return replace(ClusterConfig(ParallelDims(dp_shard=shard, ep=ep), 1, "selective"), **options)


def test_mixtral_plan_chooses_expert_parallel_with_its_all_to_all_in_the_step(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code, stdout, err = _plan(capsys, "h100-sxm-80g", "--gpus", "16", "--model-config", "mixtral-8x7b", "--seq-len",
                              "4096", "--global-batch", "64", "--choose", "--out", str(out))
    assert code == 0, err
    plan = json.loads(out.read_text())
    chosen = plan["chosen"]
    assert chosen["ep"] > 1 and chosen["fits"], chosen
    assert chosen["step_parts_seconds"]["ep_all_to_all_per_layer_s"] > 0
    assert "ep all to all" in stdout and f"--ep {chosen['ep']}" in stdout
    # The chosen command is one train runs; a mixture cut into stages or split by tensor
    # parallel is labelled as train refuses it, never chosen.
    run_line = next(line for line in stdout.splitlines() if line.startswith("Run it:"))
    _train_checks(run_line[len("Run it: "):])
    rows = plan["configurations"]
    assert {r["ep"] for r in rows} == {1, 2, 4, 8}
    for r in rows:
        if r["pp"] > 1 or r["tp"] > 1:
            assert r["runnable_by_train"] is False, r["configuration"]
    # MFU in the published convention counts each token's top-2 experts, not all 8.
    active = MIXTRAL.active_parameters
    assert 12.5e9 < active < 13.5e9 and MIXTRAL.parameters > 46e9


def test_all_to_all_runs_at_the_ep_groups_link_and_is_not_hidden():
    scenario = _scenario()
    net = Network(scenario.profile)
    inside = group(8, 1, 8)
    assert net.all_to_all_link(inside)[0] == net.nvlink
    # Across two nodes each GPU's rows for the other node leave through its own port:
    # (n−1)/(n−k) of a port in bus bandwidth, not a ring's aggregated ports.
    across = group(16, 1, 8)
    assert net.all_to_all_link(across)[0] == pytest.approx(min(net.nvlink, net.port * 15 / 8))
    four, eight = predict(_config(4), scenario), predict(_config(8), scenario)
    for p, ep in ((four, 4), (eight, 8)):
        tokens = p.config.microbatch * 4096
        busbw, alpha = net.all_to_all_link(group(ep, 1, 8))
        expected = formulas.expert_parallel_seconds(tokens, 2, MIXTRAL.hidden, 2, 1, ep, busbw, alpha, 1.0)
        assert p.comm["ep_all_to_all_per_layer_s"] == pytest.approx(expected)
    # (ep − 1)/ep of the rows leave a GPU: 3/4 at ep 4, 7/8 at ep 8.
    assert eight.comm["ep_all_to_all_per_layer_s"] > four.comm["ep_all_to_all_per_layer_s"]
    assert "ep_all_to_all_per_layer_s" not in predict(_config(1), scenario).comm


def test_the_busiest_gpu_sets_the_step_and_experts_memory_falls_with_ep():
    scenario = _scenario()
    balanced = predict(_config(8), scenario)
    skewed = predict(_config(8, expert_load=1.5), scenario)
    assert balanced.comm["ep_imbalance_per_layer_s"] == 0
    assert skewed.comm["ep_imbalance_per_layer_s"] > 0
    assert skewed.comm["ep_all_to_all_per_layer_s"] == pytest.approx(1.5 * balanced.comm["ep_all_to_all_per_layer_s"],
                                                                      rel=0.05)
    assert skewed.step_seconds > balanced.step_seconds and skewed.memory_bytes > balanced.memory_bytes
    # FSDP gathers a layer's experts whole without ep; with ep 8 each GPU gathers its one expert.
    whole, split = predict(_config(1), scenario), predict(_config(8), scenario)
    experts = MIXTRAL.expert_parameters
    assert whole.memory["gathered_blocks"] - split.memory["gathered_blocks"] >= 2 * 2 * experts * 7 / 8 * 0.99


@pytest.mark.parametrize("args, words", [
    (["--model-config", "mixtral-8x7b", "--ep", "3"], "do not split into 3"),
    (["--model-config", "llama3-8b", "--ep", "2"], "dense model"),
    (["--model-config", "mixtral-8x7b", "--expert-load", "0.5"], "--expert-load"),
], ids=["ep-3", "dense", "load"])
def test_bad_expert_parallel_input_gets_one_line(capsys, args, words):
    code, out, err = _plan(capsys, "h100-sxm-80g", "--gpus", "16", "--seq-len", "4096", "--global-batch", "64", *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in err, err
