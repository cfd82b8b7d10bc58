"""Settings declared once, as fields of a frozen dataclass, and read from everywhere.

    @dataclass(frozen=True)
    class PipelineOptions(CommonOptions):
        microbatches: Optional[int] = option(None, "micro-batches per step", metavar="M", parse=positive_int)

The declaration is the single source of a setting's name, default, type, help text and
command-line flag: the library takes it as a keyword (`microbatches=4`), the command line
gets `--microbatches M` generated from it, and a configuration file takes the same key.
Nothing here imports torch, so building a parser stays fast.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional

from .errors import UsageError, arg


def option(default: Any, help: str, *, metavar: Optional[str] = None, parse: Optional[Callable[[str], Any]] = None,
           choices: Optional[Iterable[str]] = None, flag: Optional[str] = None, command_line: bool = True,
           aliases: tuple = ()) -> Any:
    """A dataclass field that carries its own documentation. `parse` turns the flag's text
    into the value (and raises ValueError with the reason); `command_line=False` keeps a
    setting to the library; `aliases`: other names it is also given by (a keyword, a flag, a
    configuration key), which messages then use."""
    metadata = {"help": help, "metavar": metavar, "parse": parse, "choices": tuple(choices) if choices else None,
                "flag": flag, "command_line": command_line, "aliases": tuple(aliases)}
    return dataclasses.field(default=default, metadata=metadata)


def declared(cls) -> list[dataclasses.Field]:
    """The declared settings of an options class, in declaration order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def flag_of(f: dataclasses.Field) -> Optional[str]:
    if not f.metadata.get("command_line", True):
        return None
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def aliases_of(cls) -> dict[str, str]:
    """{alias: the setting it names} for the declared settings of `cls`."""
    return {alias: f.name for f in declared(cls) for alias in f.metadata.get("aliases", ())}


def spellings(cls, values: dict) -> dict[str, str]:
    """{setting: the alias it was given by} among `values` (messages name what the user typed)."""
    return {aliases_of(cls)[k]: k for k, v in values.items() if k in aliases_of(cls) and v is not None}


def canonical(cls, values: dict) -> dict:
    """`values` with every alias replaced by the setting it names; a setting given twice with
    two values is a UsageError."""
    aliases = aliases_of(cls)
    found: dict = {}
    for key, value in values.items():
        name = aliases.get(key, key)
        if value is None:
            found.setdefault(name, None)
            continue
        if found.get(name) is not None and found[name][1] != value:
            first, _ = found[name]
            raise UsageError(f"{arg(first, found[name][1])} and {arg(key, value)} name the same thing; give one of them")
        found[name] = (key, value)
    return {name: given[1] if given is not None else None for name, given in found.items()}


def build(cls, what: str, values: dict):
    """An instance of `cls` from keyword values (aliases taken for the settings they name); a
    name `cls` does not declare is a UsageError that names the ones it does (`what` says
    whose settings they are)."""
    names = [f.name for f in declared(cls)]
    values = canonical(cls, values)
    unknown = [k for k, v in values.items() if k not in names and v is not None]
    if unknown:
        listed = ", ".join(arg(k, values[k]) for k in unknown)
        verb = "does" if len(unknown) == 1 else "do"
        raise UsageError(f"{listed} {verb} not apply to {what}; drop it (it takes {', '.join(arg(n) for n in names)})")
    return cls(**{k: v for k, v in values.items() if k in names and v is not None})


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise UsageError(f"{arg(name, value)}: choose one of {', '.join(map(str, choices))}")


def check_count(name: str, value: Any, minimum: int = 1, what: str = "a whole number") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{arg(name, value)}: give {what}, at least {minimum}")
