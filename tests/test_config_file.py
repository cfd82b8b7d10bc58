"""Configuration files of `scaletrain train`: the schema is the parser itself, values are
checked as their flags are, a written config.yaml reads back to the same settings, and a
bad key or value is one line naming it. Pure: no process is started."""

from __future__ import annotations

import argparse

import pytest

from scaletrain.cli import config_file
from scaletrain.cli.train_cmd import build_parser
from scaletrain.foundation.errors import UsageError
from scaletrain.train.config import TrainConfig


def parse(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(list(argv))
    args.argv = ["train", *argv]
    return args


def test_every_flag_is_a_key_spelled_like_the_flag():
    parser = build_parser()
    keys = config_file.schema(parser)
    for action in parser._actions:
        if action.option_strings and action.dest not in ("help", "config"):
            assert action.dest in keys
            long = next(s for s in action.option_strings if s.startswith("--"))
            assert long.lstrip("-").replace("-", "_") in (action.dest, "no_" + action.dest), long
    assert {"batch_size", "tracker", "log_every_steps", "timeout", "pin_cores"} <= set(keys)


def test_a_flag_added_to_the_parser_is_a_key_at_once(tmp_path):
    parser = build_parser()
    parser.add_argument("--brand-new-option", type=int, default=3)
    (tmp_path / "run.yaml").write_text("brand_new_option: 7\n")
    assert config_file.read(tmp_path / "run.yaml", parser) == {"brand_new_option": 7}


@pytest.mark.parametrize("argv", [
    (),
    ("--strategy", "pipeline", "--pipeline-stages", "2", "--microbatches", "4", "--schedule", "gpipe"),
    ("--epochs", "3", "--lr", "0.0005", "--seed", "7", "--timeout", "90s", "--tracker", "csv", "--tracker", "wandb",
     "--no-pin-cores", "--checkpoint-every", "5", "--resume", "auto", "--log-every-seconds", "2.5",
     "--grad-compression", "bf16", "--bucket-cap-mb", "12.5", "--workload", "digits-mlp"),
])
def test_a_written_config_reads_back_to_the_same_settings(tmp_path, argv):
    parser = build_parser()
    args = parse(*argv)
    path = config_file.write(tmp_path / "config.yaml", config_file.record(args, parser))
    again = config_file.read(path, build_parser())
    for key in config_file.schema(parser):
        if key not in config_file.NOT_RECORDED:
            assert again.get(key, parser.get_default(key)) == getattr(args, key, argparse.SUPPRESS), key


def test_command_line_flags_override_the_file(tmp_path):
    (tmp_path / "run.toml").write_text('epochs = 5\nbatch_size = 16\nseed = 4\ntracker = ["csv"]\n'
                                       'pin_cores = false\ntimeout = "2m"\n')
    argv = ["--config", str(tmp_path / "run.toml"), "--epochs", "2", "--tracker", "tensorboard"]
    args = config_file.apply(parse(*argv), build_parser, argv)
    assert (args.epochs, args.batch_size, args.seed, args.pin_cores, args.timeout) == (2, 16, 4, False, 120.0)
    assert args.tracker == ["tensorboard"]  # the command line's list replaces the file's


def test_null_means_the_flags_default(tmp_path):
    (tmp_path / "run.yaml").write_text("epochs: null\nbatch_size: null\ncheckpoint_every: 0\n")
    argv = ["--config", str(tmp_path / "run.yaml")]
    args = config_file.apply(parse(*argv), build_parser, argv)
    # --batch-size's default is the workload's (None until the workload is known: 32 here).
    assert (args.epochs, args.batch_size, args.checkpoint_every) == (None, None, 0)
    assert TrainConfig.from_args(args).batch_size == 32


@pytest.mark.parametrize("text, suffix, message", [
    ("epoch: 3\n", ".yaml", "unknown key 'epoch' (did you mean epochs?); valid keys: strategy, workload"),
    ("batch-size = 3\n", ".toml", "unknown key 'batch-size' (did you mean batch_size?)"),
    ("epochs: -1\n", ".yaml", "epochs: must be at least 1, got -1"),
    ("strategy: bogus\n", ".yaml", "strategy: 'bogus' is not one of: single, dp"),
    ("lr: fast\n", ".yaml", "lr: expected a number, got 'fast'"),
    ("pin_cores: maybe\n", ".yaml", "pin_cores: expected true or false, got 'maybe'"),
    ("seed: [1, 2]\n", ".yaml", "seed: expected one value like its flag --seed takes"),
    ("tracker: [csv, neptune]\n", ".yaml", "tracker: 'neptune' is not one of: tensorboard, wandb, mlflow, csv"),
    ("timeout: -5\n", ".yaml", "timeout: expected a duration such as 90, 90s, 10m or 1h"),
    ("- epochs\n", ".yaml", "expected key: value lines at the top level, got a list"),
    ("epochs: [3\n", ".yaml", "not valid YAML"),
    ("epochs = \n", ".toml", "not valid TOML"),
])
def test_bad_file_is_one_line_naming_the_key(tmp_path, text, suffix, message):
    path = tmp_path / f"run{suffix}"
    path.write_text(text)
    with pytest.raises(UsageError) as error:
        config_file.read(path, build_parser())
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(error.value).startswith(f"--config {path}: ")


def test_missing_file(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        config_file.read(tmp_path / "nope.yaml", build_parser())


def test_what_one_command_does_is_not_recorded():
    recorded = config_file.record(parse("--out", "x", "--dry-run", "--node-rank", "1", "--epochs", "2"), build_parser())
    assert not set(recorded) & {"out", "dry_run", "node_rank", "sbatch", "config"}
    assert recorded["epochs"] == 2 and recorded["timeout"] == "10m"


def test_strategy_options_are_keys_and_a_wrong_one_names_its_flag(tmp_path):
    from scaletrain.strategies import get_strategy
    from scaletrain.cli.parsing import flag_names

    (tmp_path / "run.yaml").write_text("strategy: pipeline\nmicrobatches: 4\nschedule: gpipe\n")
    argv = ["--config", str(tmp_path / "run.yaml")]
    args = config_file.apply(parse(*argv), build_parser, argv)
    assert (args.microbatches, args.schedule) == (4, "gpipe")
    (tmp_path / "ddp.yaml").write_text("strategy: ddp\nmicrobatches: 4\n")
    argv = ["--config", str(tmp_path / "ddp.yaml")]
    args = config_file.apply(parse(*argv), build_parser, argv)
    with pytest.raises(UsageError) as caught:
        get_strategy(args.strategy, microbatches=args.microbatches)
    assert "--microbatches 4 does not apply to --strategy ddp" in caught.value.for_command_line(*flag_names(build_parser()))


def test_recorded_configuration_holds_the_options_every_strategy_takes(tmp_path):
    from scaletrain.strategies.flags import strategy_options_from_args
    from scaletrain.cli.train_cmd import record
    from scaletrain.strategies import get_strategy

    path = config_file.write(tmp_path / "config.yaml", record(TrainConfig.from_args(parse("--strategy", "ddp"))))
    argv = ["--config", str(path), "--strategy", "fsdp"]  # the file suits another strategy too
    options = strategy_options_from_args(config_file.apply(parse(*argv), build_parser, argv))
    assert options == {"precision": "fp32", "grad_accum": 1, "compile": False, "activation_checkpointing": "none",
                       "fused_norms": True, "chunked_loss": True, "gc_every": 50}
    assert get_strategy("fsdp", **options).grad_accum == 1
