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


def option(default: Any, help: Any, *, metavar: Optional[str] = None, parse: Optional[Callable[[str], Any]] = None,
           choices: Any = None, flag: Optional[str] = None, command_line: bool = True, aliases: tuple = (),
           group: Optional[str] = None, many: bool = False, underscores: bool = False, hidden: bool = False) -> Any:
    """A dataclass field that carries its own documentation. `parse` turns the flag's text
    into the value (and raises ValueError with the reason); `command_line=False` keeps a
    setting to the library; `aliases`: other names it is also given by (a keyword, a flag, a
    configuration key), which messages then use. For the command line: `flag` (default
    --name; `--no-name` for a setting that is on by default), `group` (the --help section),
    `many` (the flag may be given several times: a list), `underscores` (torchrun's spelling
    too: --nproc_per_node), `hidden` (no help line). `help` and `choices` may be functions,
    worked out when a parser is built (listing them may need torch)."""
    if choices is not None and not callable(choices):
        choices = tuple(choices)
    metadata = {"help": help, "metavar": metavar, "parse": parse, "choices": choices or None, "flag": flag,
                "command_line": command_line, "aliases": tuple(aliases), "group": group, "many": many,
                "underscores": underscores, "hidden": hidden}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared(cls) -> list[dataclasses.Field]:
    """The declared settings of an options class, in declaration order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def flag_of(f: dataclasses.Field) -> Optional[str]:
    if not f.metadata.get("command_line", True):
        return None
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def key_of(f: dataclasses.Field) -> str:
    """The setting's name among a command line's parsed arguments and in a configuration file:
    its flag without the dashes, `_` for `-` (`--tracker`: tracker; `--no-pin-cores`: pin_cores)."""
    name = (f.metadata.get("flag") or "--" + f.name)[2:].replace("-", "_")
    return name[3:] if name.startswith("no_") and f.default is True else name


def _worked_out(spec: Any) -> Any:
    return spec() if callable(spec) else spec


def add_declared_arguments(parser, cls, between: Optional[dict] = None, **help_values: Any) -> None:
    """One flag per declared setting of `cls` and of the declared dataclasses it nests, in
    declaration order, each in the --help section its declaration names: a command line
    (and, through its parser, a configuration file's keys) generated from the declarations.
    `between`: {field: add(parser)} for a field whose flags come from elsewhere (a dict of the
    strategies' options); `help_values` fill `{name}` in help texts (a default that differs
    between commands)."""
    import argparse

    sections: dict = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if "help" not in meta:
            if f.name in (between or {}):
                between[f.name](parser)
            elif f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
                add_declared_arguments(parser, f.default_factory, **help_values)
            continue
        if not meta.get("command_line", True):
            continue
        title = meta.get("group")
        section = parser if title is None else sections.get(title) or sections.setdefault(
            title, parser.add_argument_group(title))
        flag = flag_of(f)
        flags = [flag, *(["--" + flag[2:].replace("-", "_")] if meta.get("underscores") and "-" in flag[2:] else [])]
        text = _worked_out(meta["help"])
        for name, value in help_values.items():
            text = text.replace("{" + name + "}", str(value))
        kwargs: dict = {"dest": key_of(f), "help": argparse.SUPPRESS if meta.get("hidden") else text}
        if f.default is False or (f.default is True and flag.startswith("--no-")):  # a switch
            kwargs.update(action="store_true" if f.default is False else "store_false", default=f.default)
        else:
            kwargs["default"] = None if meta.get("many") else f.default
            if meta.get("many"):
                kwargs["action"] = "append"
            if meta.get("choices"):
                kwargs["choices"] = list(_worked_out(meta["choices"]))
            if meta.get("parse"):
                kwargs["type"] = meta["parse"]
            if meta.get("metavar"):
                kwargs["metavar"] = meta["metavar"]
        section.add_argument(*flags, **kwargs)


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


def parsed_values(cls, parsed) -> dict:
    """{field: value} of `cls`'s declared settings from a command line's parsed arguments (an
    argparse.Namespace), nested declared dataclasses built whole; a setting without a flag
    (or not on this command line) keeps its default."""
    found = {}
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
                found[f.name] = f.default_factory(**parsed_values(f.default_factory, parsed))
            continue
        if f.metadata.get("command_line", True) and hasattr(parsed, key_of(f)):
            found[f.name] = getattr(parsed, key_of(f))
    return found


def flag_values(settings) -> dict:
    """{key: value} of a declared dataclass's settings as its command line holds them (the
    inverse of parsed_values), nested ones included."""
    found = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if "help" not in f.metadata:
            if dataclasses.is_dataclass(value):
                found.update(flag_values(value))
            continue
        if f.metadata.get("command_line", True):
            found[key_of(f)] = (list(value) or None) if f.metadata.get("many") else value
    return found


def flags_of(cls) -> tuple[set, set]:
    """(the flags of `cls`'s settings that take a value, those that do not), every spelling."""
    values, switches = set(), set()
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata or not f.metadata.get("command_line", True):
            continue
        flag = flag_of(f)
        spelled = {flag, *(["--" + flag[2:].replace("-", "_")] if f.metadata.get("underscores") else [])}
        (switches if isinstance(f.default, bool) else values).update(spelled)
    return values, switches


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
