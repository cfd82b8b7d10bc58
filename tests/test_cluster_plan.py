"""Planning GPU clusters from hardware profiles (`scaletrain plan --hardware`), and MFU in runs:

- FLOPs: torch's FlopCounterMode on a real forward and backward of a small Llama, a small
  GPT-2 and a small Mixtral (Hugging Face, built from configs) equals the count of scaletrain's operator trace, the
  planner's traced reference model, and a run's `model_flops_per_step`;
- MFU between 0 and 1 for the built-in workloads on this CPU;
- the planner's memory method applied to this CPU against a measured run (within 10%);
- the published development set: throughput, memory, fit and --choose, in seconds;
- bad input in one line each; the JSON rows and the PNG.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO, in_process, run

TINY_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 256, "max_position_embeddings": 256}
TINY_GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4,
             "vocab_size": 256, "n_positions": 256, "bos_token_id": 0, "eos_token_id": 0}
# A mixture of experts: Hugging Face runs its experts with torch's grouped products, which
# torch's counter does not count (scaletrain's formula does: flops/grouped_mm.py).
TINY_MIXTRAL = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 64,
                "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 256, "max_position_embeddings": 256}


def hf_model(config: dict):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(hf_config_from(config), attn_implementation="sdpa")


def hf_config_from(config: dict):
    from transformers import AutoConfig

    data = dict(config)
    return AutoConfig.for_model(data.pop("model_type"), **data)


def counter_flops(model, batch: int, seq: int) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    from scaletrain.flops import CUSTOM_FLOPS

    ids = torch.randint(0, 256, (batch, seq))
    with FlopCounterMode(display=False, custom_mapping=CUSTOM_FLOPS) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("config", [TINY_LLAMA, TINY_GPT2, TINY_MIXTRAL], ids=["llama", "gpt2", "mixtral"])
def test_flops_equal_torchs_counter(config):
    """The trace's count and the planner's (its reference model, traced on the meta device at
    another micro-batch and scaled) equal FlopCounterMode's on the real model's step."""
    from scaletrain.flops import TraceMode
    from scaletrain.workloads.model_shapes import shape_from_config
    from scaletrain.plan.cluster.traced import TRACE_MB, Variant, trace

    model = hf_model(config)
    expected = counter_flops(model, 2, 32)
    ids = torch.randint(0, 256, (2, 32))
    with TraceMode() as mode:
        model(input_ids=ids, labels=ids).loss.backward()
    assert mode.trace.model_flops == expected and mode.trace.recompute_flops == 0
    # Hugging Face's GPT-2 gives SDPA a mask, which on a CPU takes the math path: two products.
    attention = "eager" if config["model_type"] == "gpt2" else "flash"
    shape = shape_from_config(config, "tiny")
    layer, rest, _one = trace(shape, Variant(1, 32, attention=attention))
    planned = (shape.layers * (layer.flops["forward"] + layer.flops["backward"])
               + rest.flops["forward"] + rest.flops["backward"]) * 2 / TRACE_MB
    assert planned == expected
    if shape.experts:  # each token's top-k experts counted, on every expert-parallel GPU's share alike
        for ep in (2, 4):
            layer_ep, _rest, _one = trace(shape, Variant(1, 32, attention=attention, ep=ep))
            assert layer_ep.flops == layer.flops


def _train(tmp_path: Path, name: str, **settings) -> dict:
    from scaletrain.train.config import TrainConfig
    from scaletrain.train.loop import train

    config = TrainConfig(strategy="single", max_steps=settings.pop("max_steps", 3), pin_cores=False, **settings)
    return train(config, tmp_path / name)


@pytest.mark.parametrize("config", [TINY_LLAMA, TINY_GPT2, TINY_MIXTRAL], ids=["llama", "gpt2", "mixtral"])
def test_a_runs_model_flops_are_torchs_count_of_its_step(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    summary = _train(tmp_path, "run", model_config=str(path), seq_len=32, batch_size=2)
    assert summary["model_flops_per_step"] == counter_flops(hf_model(config), 2, 32)
    assert summary["hardware_flops_per_step"] == summary["model_flops_per_step"]


def test_checkpointing_recomputation_counts_apart(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_LLAMA))
    summary = _train(tmp_path, "run", model_config=str(path), seq_len=32, batch_size=2,
                     strategy_options={"activation_checkpointing": "full"})
    assert summary["model_flops_per_step"] == counter_flops(hf_model(TINY_LLAMA), 2, 32)
    assert summary["hardware_flops_per_step"] > 1.2 * summary["model_flops_per_step"]


@pytest.mark.parametrize("workload", ["digits-cnn", "digits-mlp", "synthetic-cnn", "synthetic-mlp", "stdlib-gpt"])
def test_mfu_between_0_and_1_on_this_cpu(tmp_path, workload):
    summary = _train(tmp_path, workload, workload=workload, max_steps=4)
    assert summary["model_flops_per_step"] > 0
    assert 0 < summary["mfu"] < 1, summary
    assert summary["tflops_per_second"] > 0 and "matrix multiply" in summary["peak_source"]


MEMORY_RUN = """
import gc, json, torch
from transformers import LlamaConfig, LlamaForCausalLM
from scaletrain.memory.meter import MemoryMeter
from scaletrain.plan.cluster.memory import traced_step_bytes
from scaletrain.memory.steady import make_steady

make_steady()  # freed tensors of 2 MB and more go back to the system: resident memory is what is held
config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                     num_key_value_heads=4, vocab_size=4096, max_position_embeddings=1024)
config._attn_implementation = "sdpa"

def batch():
    ids = torch.randint(0, 4096, (2, 512))
    return {"input_ids": ids, "labels": ids}

traced = traced_step_bytes(lambda: LlamaForCausalLM(config), batch)
torch.manual_seed(0)
model = LlamaForCausalLM(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
data = batch()
meter = MemoryMeter(torch.device("cpu"))
gc.collect()
baseline = meter.current()
meter.reset_peak()
for _ in range(2):  # the second step holds the moments the first made
    model(**data).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
print(json.dumps({**traced, "measured": meter.peak() - baseline}))
"""


def test_memory_method_on_this_cpu_within_10_percent_of_a_measured_run():
    """The planner's memory method — the step's activations and transient tensors from a trace
    under fake tensors, gradients and AdamW's two moments by parts — against the resident
    memory a measured small run adds to its model, in a fresh process (freed tensors returned
    to the system)."""
    done = run([sys.executable, "-c", MEMORY_RUN], timeout=180)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    predicted = 3 * result["parameters"] + result["activations_and_transient"]  # gradients, 2 moments, the step
    assert abs(predicted / result["measured"] - 1) <= 0.10, (predicted, result)


def _published_check():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import published_check

    return published_check


def test_published_runs_predicted_within_targets():
    """The development set (benchmarks/published_rows.py, 47 published runs of 8 sources),
    each predicted with the software it states: median |error| within 5%, every row within 30%
    (the long-sequence context-parallel rows are the furthest), memory within 15% where
    published, every published configuration predicted to fit."""
    check = _published_check()
    results = [check.evaluate(row) for row in check.development_set()]
    s = check.summary(results)
    assert s["rows"] >= 45 and s["median_abs_error"] <= 0.05 and s["largest_abs_error"] <= 0.30, check.markdown(results)
    assert s["memory_rows"] >= 20 and s["memory_largest_abs_error"] <= 0.15, check.markdown(results)
    assert not s["published_configurations_not_fitting"], check.markdown(results)
    short = [abs(r["error"]) for r in results if r["seq"] <= 32768]
    assert statistics.median(short) <= 0.05 and max(short) <= 0.20, check.markdown(results)


@pytest.mark.parametrize("name", ["8B FSDP 8, eager", "GPT 1.7B TP 1 × PP 1, 32 GPUs"])
def test_choose_picks_a_fitting_configuration_at_least_as_fast(name):
    check = _published_check()
    row = next(row for row in check.development_set() if row.name == name)
    result = check.evaluate(row, with_choice=True)
    assert result["chosen_fits"] and result["chosen_vs_published_configuration"] >= 1.0


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    """`scaletrain plan --hardware ...` in this process (torch is imported already)."""
    return in_process(capsys, "plan", "--hardware", *args)


@pytest.mark.parametrize("args, words", [
    (["nosuch", "--model-config", "llama3-8b"], "unknown hardware 'nosuch'"),
    (["h100-sxm-80g", "--model-config", "BERT"], "encoder"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--gpus", "24", "--tp", "3"], "--tp 3 does not divide"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--gpus", "12"], "not a whole number of nodes"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--gpus", "16", "--tp", "8", "--pp", "3"], "do not divide"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--seq-len", "200000"], "longer than"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--dp-shard", "8", "--global-batch", "12"], "--global-batch"),
    (["a100-80g", "--model-config", "llama3-8b", "--float8"], "no float8"),
    (["h100-sxm-80g", "--model-config", "LIST"], "is a JSON object"),
    (["h100-sxm-80g", "--model-config", "NEGATIVE", "--seq-len", "1024"], "hidden_size -64"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--seq-len", "1"], "--seq-len 2 or more"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--gpus", "8", "--seq-len", "4", "--tp", "8"], "--tp 8 parts"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--strategy", "ddp", "--cp", "2"], "does not apply to --strategy ddp"),
    (["a100-80g", "--model-config", "llama3-8b", "--attention", "flash3"], "no published rates of flash3"),
    (["h100-sxm-80g", "--model-config", "llama3-8b", "--torch", "two"], "--torch two"),
], ids=["hardware", "encoder", "heads", "nodes", "degrees", "positions", "batch", "float8", "json-list", "negative",
        "seq-1", "seq-tp", "ddp-cp", "flash3-a100", "torch-version"])
def test_bad_input_gets_one_line(tmp_path, capsys, args, words):
    files = {"LIST": [1, 2], "NEGATIVE": {"model_type": "llama", "hidden_size": -64, "num_hidden_layers": 2,
                                          "num_attention_heads": 4, "vocab_size": 256}}
    for key, content in files.items():
        if key in args:
            (tmp_path / f"{key.lower()}.json").write_text(json.dumps(content))
            args = [str(tmp_path / f"{key.lower()}.json") if a == key else a for a in args]
    if "BERT" in args:
        bert = tmp_path / "config.json"
        bert.write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 64,
                                    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}))
        args = [str(bert) if a == "BERT" else a for a in args]
    code, out, err = _plan(capsys, *args)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err, err


def test_json_rows_png_and_train_flags(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code, stdout, err = _plan(capsys, "h100-sxm-80g", "--gpus", "16", "--model-config", "llama3-8b", "--seq-len",
                              "4096", "--global-batch", "32", "--activation-checkpointing", "selective", "--choose",
                              "--out", str(out))
    assert code == 0, err
    assert "Chosen:" in stdout and "Runner-up:" in stdout and "scaletrain train --model-config" in stdout
    plan = json.loads(out.read_text())
    row = plan["chosen"]
    for field in ("tokens_per_second_per_gpu", "mfu", "mfu_published", "mfu_convention", "mfu_published_convention",
                  "memory_bytes", "fits", "step_seconds", "world_size", "tp", "pp", "cp", "dp_shard", "dp_replicate",
                  "software", "runnable_by_train"):
        assert field in row
    assert row["world_size"] == 16 and row["fits"] and 0 < row["mfu"] < 1 and 0 < row["mfu_published"] < 1
    assert row["software"]["loss"] == "chunked" and row["software"]["attention"] == "sdpa" and row["runnable_by_train"]
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_hardware_profiles_by_exact_name(tmp_path):
    from scaletrain.foundation.errors import UsageError
    from scaletrain.hardware import for_device_name, load_profile

    assert for_device_name("NVIDIA H200")[0].name == "h200"
    assert for_device_name("NVIDIA H100 80GB HBM3")[0].name == "h100-sxm-80g"
    profile, reason = for_device_name("NVIDIA H100 NVL")  # a near name is not guessed
    assert profile is None and "not guessed" in reason
    mine = tmp_path / "mine.toml"
    mine.write_text((Path(load_profile("a100-80g").source)).read_text().replace('name = "a100-80g"', 'name = "mine"'))
    assert load_profile(str(mine)).name == "mine" and load_profile(str(mine)).peak("bf16") == 312e12
    with pytest.raises(UsageError):
        load_profile("nosuch")


def test_a_model_of_no_layers_is_named_as_such(tmp_path, capsys):
    """Not 'no configuration makes a global batch of 8': the batch was never what was wrong."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 0,
                                  "num_attention_heads": 4, "vocab_size": 128, "intermediate_size": 128}))
    code, out, err = _plan(capsys, "h100-sxm-80g", "--model-config", str(config), "--gpus", "8", "--global-batch", "8",
                           "--seq-len", "1024")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "num_hidden_layers 0" in lines[0] and "global batch" not in lines[0], lines[0]
