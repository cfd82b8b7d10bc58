"""What `scaletrain plan --hardware` prints is what `scaletrain train` runs, and the user's
choices are kept or refused in one line:

- a configuration train refuses or runs differently (a pipeline with context parallel, float8
  with tensor parallel, an interleaved schedule) is labelled "not runnable by train" and never
  chosen; every other row's printed command passes train's own parser and checks;
- `--strategy ddp --cp 2` is refused in train's words (tests/test_cluster_plan.py's bad input),
  and so is a plan of this machine with `--cp` where train could not split the sequences;
- durations read in the unit that suits them; `scaletrain calibrate`'s CPU dry run writes a
  profile that `plan --hardware FILE` reads.
"""

from __future__ import annotations

import json
import shlex

import pytest

from scaletrain.cli import main


def _train_checks(flags: str) -> None:
    """`scaletrain train FLAGS` parsed by train's own parser and its strategy checked as train
    checks it before starting anything (raises UsageError where train refuses)."""
    from scaletrain.cli.train_flags import build_parser
    from scaletrain.strategies import get_strategy
    from scaletrain.train.config import TrainConfig

    argv = shlex.split(flags)[2:]  # after "scaletrain train"
    config = TrainConfig.from_args(build_parser().parse_args(argv))
    world = config.launch.nproc_per_node * (config.launch.nnodes or 1)
    get_strategy(config.strategy, **config.strategy_options).check_world_size(world)


def test_rows_train_cannot_run_are_labelled_and_never_chosen(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = main(["plan", "--hardware", "h100-sxm-80g", "--model-config", "llama3-70b", "--gpus", "32", "--seq-len",
                 "32768", "--global-batch", "32", "--float8", "--activation-checkpointing", "full", "--choose",
                 "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    plan = json.loads(out.read_text())
    rows = plan["configurations"]
    refused = {r["configuration"]: r["not_runnable_because"] for r in rows if not r["runnable_by_train"]}
    reasons = " ".join(refused.values())
    assert "does not compose with --strategy pipeline" in reasons  # pipeline × cp
    assert "does not combine with tensor parallel" in reasons  # float8 × tp
    assert "not interleaved" in reasons
    assert plan["chosen"]["runnable_by_train"] and plan["chosen"]["configuration"] not in refused
    for r in rows:
        if r["runnable_by_train"]:
            _train_checks(r["train_flags"])
    assert "not runnable by train" in printed


def test_plan_of_this_machine_refuses_cp_train_would_refuse(capsys):
    for argv, words in ((["--workload", "digits-cnn"], "has none"), (["--workload", "stdlib-gpt", "--seq-len", "62"],
                                                                      "multiple of 4")):
        code = main(["plan", *argv, "--cp", "2", "--world-sizes", "2"])
        err = capsys.readouterr().err
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_durations_in_the_unit_that_suits_them(tmp_path, capsys):
    from scaletrain.plan.cluster.report import duration

    assert duration(3 * 86400) == "3.0 days" and duration(5 * 3600) == "5.0 hours" and duration(600) == "10 minutes"
    small = tmp_path / "config.json"  # a 45 M-parameter Llama: a trillion tokens on 64 GPUs take hours
    small.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
                                 "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 32000,
                                 "max_position_embeddings": 4096}))
    code = main(["plan", "--hardware", "h100-sxm-80g", "--model-config", str(small), "--gpus", "64", "--seq-len",
                 "2048", "--strategy", "fsdp", "--activation-checkpointing", "none", "--choose"])
    out = capsys.readouterr().out
    assert code == 0 and "1T tokens in" in out and "0.0 days" not in out and " hours." in out, out


@pytest.mark.timeout(180)
def test_calibrate_dry_run_writes_a_profile_plan_reads(tmp_path, capsys):
    profile = tmp_path / "mine.toml"
    assert main(["calibrate", "--dry-run", "--out", str(profile)]) == 0
    out = capsys.readouterr().out
    assert profile.exists() and profile.with_suffix(".json").exists()
    assert "against the built-in profile h200" in out and "bf16 product" in out and "memory-bound kernels" in out
    code = main(["plan", "--hardware", str(profile), "--model-config", "llama3-8b", "--gpus", "8", "--strategy",
                 "fsdp", "--micro-batch", "1", "--activation-checkpointing", "full"])
    out = capsys.readouterr().out
    assert code == 0 and "calibration measured on cpu (dry run)" in out, out
