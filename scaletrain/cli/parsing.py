"""argparse, made to fail in one line: what was wrong and how to fix it, exit status 2.
Abbreviated options are refused everywhere (`--nproc` is not `--nproc-per-node`): an
abbreviation accepted here would be passed on, unrecognised, to the ranks' command line."""

from __future__ import annotations

import argparse
import re

from ..foundation.text_values import duration, non_negative_int, port, positive_float, positive_int, whole_number  # noqa: F401 (the CLI's readers)


class OneLineParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's default prints the whole usage first
        # "argument --nproc-per-node/--nproc_per_node": the flag once, as --help spells it.
        message = re.sub(r"(--[\w-]+)/--[\w]+(?=[:/ ])", lambda m: m.group(1), message)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def with_underscores(*flags: str) -> tuple[str, ...]:
    """The flags, plus torchrun's underscore spelling of each (`--nproc_per_node`)."""
    spelled = list(flags)
    for flag in flags:
        if flag.startswith("--") and "-" in flag[2:]:
            spelled.append("--" + flag[2:].replace("-", "_"))
    return tuple(spelled)


def fail(message: str) -> int:
    """`scaletrain: error: MESSAGE`, status 2 (a rank hands the line to its launcher, which
    shows it once for all the ranks that found the same mistake)."""
    from ..launchers.failures import say_usage_error

    say_usage_error(message)
    return 2


def flag_names(parser: argparse.ArgumentParser) -> tuple[dict, frozenset]:
    """(setting name -> its flag, the flags that take no value), over a parser and its
    subcommands: how an error names a setting on the command line."""
    flags: dict[str, str] = {}
    switches: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                more, more_switches = flag_names(sub)
                for name, flag in more.items():
                    flags.setdefault(name, flag)
                switches |= more_switches
        elif action.option_strings and action.dest not in ("help",):
            flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
            flags.setdefault(action.dest, flag)
            if action.nargs == 0:
                switches.add(flag)
        elif not action.option_strings and action.dest:
            flags.setdefault(action.dest, action.metavar or action.dest)
    return flags, frozenset(switches)
