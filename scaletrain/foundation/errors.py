"""Errors that mean "the user asked for something that cannot work".

The command line turns a UsageError into one line on stderr and exit status 2, never a
traceback: the message must say what was found and the exact fix (flag or value).

The same mistake reaches users through two doors: a keyword of the library
(`scaletrain.init("pipeline", microbatches=3)`) or a flag of the command line
(`--microbatches 3`). Messages name a setting with `arg("microbatches", 3)`, and the
message is spelt for whoever reads it: `microbatches=3` by `str(error)` (the library),
`--microbatches 3` by `error.for_command_line(flags)` (the command line, which knows its
flags).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

_MARK, _SEP = "\x1f", "\x1e"  # ASCII unit/record separators: never part of a user's text
_MARKED = re.compile(f"{_MARK}([^{_MARK}{_SEP}]+)(?:{_SEP}([^{_MARK}]*))?{_MARK}")
_NO_VALUE = object()
_DOOR, _OR = "\x1d", "\x1c"  # group/file separators: a fix told differently to each door
_DOORS = re.compile(f"{_DOOR}([^{_DOOR}{_OR}]*){_OR}([^{_DOOR}]*){_DOOR}")


def by_door(library: str, command_line: str) -> str:
    """A fix that is spelt differently through each door (`init_fn=fn(module)` to run.setup
    in the library, `--meta-init never` on the command line): each reader sees only theirs."""
    return f"{_DOOR}{library}{_OR}{command_line}{_DOOR}"


def _door(text: str, which: int) -> str:
    return _DOORS.sub(lambda m: m.group(which), text)


def arg(name: str, value: Any = _NO_VALUE) -> str:
    """A setting named inside an error message: `arg("microbatches", 4)`."""
    if value is _NO_VALUE:
        return f"{_MARK}{name}{_MARK}"
    quoted = isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))
    return f"{_MARK}{name}{_SEP}{'s' if quoted else 'v'}{_value_text(value)}{_MARK}"


def _value_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def as_library(text: str) -> str:
    """`microbatches=4`, `schedule='gpipe'`: as a keyword argument is written."""
    text = _door(text, 1)

    def spell(m: re.Match) -> str:
        name, value = m.group(1), m.group(2)
        if value is None:
            return name
        return f"{name}={value[1:]!r}" if value[0] == "s" else f"{name}={value[1:]}"
    return _MARKED.sub(spell, text)


def as_command_line(text: str, flags: Mapping[str, str], switches: frozenset = frozenset()) -> str:
    """`--microbatches 4`, as the flag is typed. `flags`: setting name -> flag; `switches`:
    the flags that take no value (a boolean setting is then the bare flag)."""
    text = _door(text, 2)

    def spell(m: re.Match) -> str:
        name, value = m.group(1), m.group(2)
        flag = flags.get(name)
        if flag is None:  # a library-only setting: keep the keyword form
            return as_library(m.group(0))
        if value is None or flag in switches:
            return flag
        return f"{flag} {value[1:]}"
    return _MARKED.sub(spell, text)


class _FlagsByRule(dict):
    def get(self, name: str, default=None) -> str:
        return "--" + name.replace("_", "-")


def as_flags(text: str) -> str:
    """`--grad-accum 4`: every setting spelt as a flag by the rule all of scaletrain's flags
    follow (`_` to `-`), for lines the command line shows without its parser at hand (a
    rank of `scaletrain train`)."""
    return as_command_line(text, _FlagsByRule())


class UsageError(Exception):
    """A user's mistake: bad flag, bad value, impossible combination. Exit status 2."""

    #: True for errors that every rank of a job raises alike (a verdict agreed by all of
    #: them, or rank 0's decision broadcast to all): rank 0 says it, the others stop
    #: silently with the same status, so it is shown once.
    same_on_every_rank = False

    def __str__(self) -> str:
        return as_library(self.raw)

    @property
    def raw(self) -> str:
        return str(self.args[0]) if self.args else ""

    def for_command_line(self, flags: Mapping[str, str], switches: frozenset = frozenset()) -> str:
        return as_command_line(self.raw, flags, switches)


class AgreedError(UsageError):
    """A mistake every rank finds alike (in the same model, the same data, the same
    settings): rank 0 says it, the others stop silently."""

    same_on_every_rank = True


class DetectionError(UsageError):
    """The launcher's environment variables contradict each other or are incomplete."""
