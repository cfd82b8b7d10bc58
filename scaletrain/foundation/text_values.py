"""Reading settings from text (a flag's value, a configuration file's entry): each reader
returns the value or raises argparse.ArgumentTypeError with the reason, which argparse
prints after the flag's name. No torch here: parsers must build fast."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    return whole_number(text, minimum=1)


def non_negative_int(text: str) -> int:
    return whole_number(text, minimum=0)


def whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}" if minimum
                                         else f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is at most 65535, got {value}")
    return value


def duration(text: str) -> float:
    """Seconds: a bare number is seconds; 90s, 10m, 1h are accepted too."""
    from .durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration_text(seconds: float) -> str:
    from .durations import format_duration

    return format_duration(seconds)


duration.to_text = _duration_text  # how a configuration file writes it, so that it reads back


def name_list(text: str) -> tuple:
    """'conv2, fc2' -> ('conv2', 'fc2')."""
    names = tuple(n.strip() for n in str(text).split(","))
    if not names or any(not n for n in names):
        raise argparse.ArgumentTypeError(f"expected names separated by commas, e.g. conv2,fc1; got {text!r}")
    return names


def factory_name(text: str) -> str:
    """`module:function`, the name of a user's function (imported where it is used)."""
    module, sep, function = str(text).partition(":")
    if not sep or not module or not function:
        raise argparse.ArgumentTypeError(f"expected module:function, e.g. mymodels:parallelize, got {text!r}")
    return str(text)


def reshard_value(text) -> bool | int:
    """FSDP's reshard_after_forward: true, false, or a whole number of shards."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word in ("true", "yes"):
        return True
    if word in ("false", "no"):
        return False
    try:
        value = int(word)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected true, false or a number of shards, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected true, false or a number of shards of at least 1, got {text!r}")
    return value


reshard_value.to_text = lambda value: str(value).lower()  # config.yaml writes what the flag reads back


def on_off(text) -> bool:
    """A setting that is on or off: true/false (yes/no, on/off)."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word in ("true", "yes", "on"):
        return True
    if word in ("false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


on_off.to_text = lambda value: str(value).lower()


def shell_words(text: str) -> tuple:
    """'--mca btl_tcp_if_include eth0' -> its words, split as a shell would."""
    import shlex

    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot split {text!r} like a shell would ({exc})") from None


def _shell_text(words) -> str:
    import shlex

    return shlex.join(words)


shell_words.to_text = _shell_text  # how a configuration file records it (read back by shell_words)


#: The value of a setting that scaletrain works out itself (--device, --backend, --launcher,
#: --resume, --meta-init, --checkpoint-layout, --task): not the `auto` strategy.
AUTO = "auto"
