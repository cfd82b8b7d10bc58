"""`scaletrain train --config FILE`: a run's settings in a YAML or TOML file, and the
config.yaml every run writes into its folder.

The schema is the `scaletrain train` parser itself: a key is an option's destination, which
is its long flag without the dashes and with `_` for `-` (`--batch-size` → `batch_size`,
`--no-pin-cores` → `pin_cores: false`). Every flag anyone adds is a key at once, checked by
the flag's own type and choices; there is no second list to keep in step.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from ..foundation.defaults import CONFIG_FILE  # noqa: F401 (the name the commands import from here)
from ..foundation.errors import UsageError
from ..foundation.safe_files import write_text_atomic, writing

#: Options that say what one command does, not what the run is: not written to config.yaml
#: (a repeat gets its own --out; --dry-run and --sbatch are one-off actions; each node of a
#: multi-node run has its own --node-rank).
NOT_RECORDED = frozenset({"config", "out", "dry_run", "sbatch", "node_rank"})

HEADER = """\
# The complete configuration of a `scaletrain train` run, as it was resolved and checked.
# Repeat the run with: scaletrain train --config THIS_FILE (flags given there override it).
# Keys are the long flags of `scaletrain train --help` with _ for -. Options of some strategies
# only (microbatches, grad_compression, ...) appear when given; otherwise the strategy's defaults apply.
"""


def schema(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every option of the parser by destination (its config key), in --help order. The
    strategies' options are among them (their flags are absent from the parsed arguments
    unless given, so a strategy can refuse one that means nothing to it)."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")}


def read(path: Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The file's settings, each checked and converted as its flag would be; null means the
    flag's default (so a key can be left in a file without a value)."""
    where = f"--config {path}"
    data = _load(Path(path), where)
    keys = schema(parser)
    values = {}
    for key, value in data.items():
        if key not in keys:
            near = difflib.get_close_matches(str(key), keys, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise UsageError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(keys)}")
        if value is not None:
            values[key] = convert(keys[key], value, f"{where}: {key}")
    return values


def settings(path: str | Path) -> dict:
    """A configuration file's keys and values as written (unchecked)."""
    return _load(Path(path), f"--config {path}")


def _load(path: Path, where: str) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file; name a YAML or TOML file (a run's folder holds {CONFIG_FILE})") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot be read ({exc.strerror}); name a readable file") from None
    try:
        if path.suffix.lower() == ".toml":
            data = _toml().loads(text)
        else:
            data = yaml.safe_load(text)
    except Exception as exc:  # YAML and TOML each have their own error classes
        reason = " ".join(str(exc).split())
        raise UsageError(f"{where}: not valid {'TOML' if path.suffix.lower() == '.toml' else 'YAML'}: {reason}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected key: value lines at the top level, got a {type(data).__name__}")
    return data


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the same parser, from PyPI
        import tomli as tomllib
    return tomllib


def convert(action: argparse.Action, value: Any, where: str) -> Any:
    """`value` from a file as the option's flag would have given it."""
    if action.nargs == 0:  # a flag without a value: the key holds the flag's resulting value
        if not isinstance(value, bool):
            raise UsageError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(action, argparse._AppendAction):  # given several times on the command line
        items = value if isinstance(value, list) else [value]
        return [_one(action, item, where) for item in items]
    return _one(action, value, where)


def _flag(action: argparse.Action) -> str:
    """The flag as --help spells it first (not torchrun's underscore spelling)."""
    return next((s for s in action.option_strings if s.startswith("--")), action.option_strings[-1])


def _one(action: argparse.Action, value: Any, where: str) -> Any:
    if isinstance(value, (bool, list, dict)):
        shown = str(value).lower() if isinstance(value, bool) else value
        raise UsageError(f"{where}: expected one value like its flag {_flag(action)} takes, got {shown!r}")
    if value == action.default and type(value) is type(action.default):
        return value  # a default its own flag cannot spell (--checkpoint-every 0 means "never")
    converted = str(value)
    if action.type is not None:
        try:
            converted = action.type(converted)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: {exc}") from None
    if action.choices is not None and converted not in action.choices:
        raise UsageError(f"{where}: {value!r} is not one of: {', '.join(map(str, action.choices))}")
    return converted


def given_on_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The destinations the command line set (parsed again with every default suppressed)."""
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv)))


def apply(args: argparse.Namespace, build_parser: Callable[[], argparse.ArgumentParser],
          argv: list[str]) -> argparse.Namespace:
    """`args` with the values of its --config file, except those the command line gave.
    `argv`: the subcommand's own arguments (what `build_parser()` parses)."""
    values = read(args.config, build_parser())
    given = given_on_command_line(build_parser(), argv)
    merged = {**vars(args), **{k: v for k, v in values.items() if k not in given}}
    return argparse.Namespace(**merged)


def record(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The values to write: every recorded option, as text a file and `read` take back."""
    values = {}
    for key, action in schema(parser).items():
        if key in NOT_RECORDED:
            continue
        value = getattr(args, key, action.default)
        if value == argparse.SUPPRESS:  # a strategy option not given: the strategy's default
            continue
        to_text = getattr(action.type, "to_text", None)  # a type whose plain str() does not read back
        if value is not None and to_text is not None:
            value = [to_text(v) for v in value] if isinstance(value, list) else to_text(value)
        elif isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        values[key] = value
    return values


def write(path: Path, values: dict[str, Any]) -> Path:
    with writing(path):
        write_text_atomic(path, HEADER + yaml.safe_dump(values, sort_keys=False, allow_unicode=True))
    return path
