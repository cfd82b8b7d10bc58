"""The command-line flags of the strategies' options, generated from each strategy's
options dataclass (`scaletrain.strategies.*.Options`): one flag per option name, its help
gathered from every strategy that takes it. No second list to keep in step.

Only flags the user gave become options (the others are absent from the parsed arguments),
so a strategy can tell "not given" from a default and reject a flag that means nothing to it
(--microbatches with ddp) in one line."""

from __future__ import annotations

import argparse

from ..foundation.options import aliases_of, declared, flag_of
from . import REGISTRY


def _options_by_name() -> dict[str, list[tuple[str, object]]]:
    """option name -> [(strategy name, its field)], in registry order."""
    found: dict[str, list[tuple[str, object]]] = {}
    for name, cls in REGISTRY.items():
        for f in declared(cls.Options):
            if flag_of(f):
                found.setdefault(f.name, []).append((name, f))
    return found


def _help(uses: list[tuple[str, object]]) -> str:
    """One help text: shared wording once, otherwise 'mp, hybrid: …; pipeline: …'."""
    texts: dict[str, list[str]] = {}
    for strategy, f in uses:
        default = f.default if f.default is not None else None
        text = f.metadata["help"] + (f" (default {default})" if default not in (None, False) else "")
        texts.setdefault(text, []).append(strategy)
    if len(uses) == len(REGISTRY) and len(texts) == 1:
        return next(iter(texts)) + "; every strategy"
    return "; ".join(f"{', '.join(strategies)}: {text}" for text, strategies in texts.items())


def _aliases() -> dict[str, str]:
    """{alias: the option it names}, e.g. pipeline_stages: pp."""
    found: dict[str, str] = {}
    for cls in REGISTRY.values():
        found.update(aliases_of(cls.Options))
    return found


def add_strategy_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("strategy options (each applies to the strategies it names)")
    aliases = _aliases()
    for name, uses in _options_by_name().items():
        f = uses[0][1]
        meta = f.metadata
        kwargs = {"dest": name, "default": argparse.SUPPRESS, "help": _help(uses)}
        if f.default is False:  # a switch: the flag alone turns it on
            kwargs["action"] = "store_true"
        elif meta.get("choices"):
            kwargs["choices"] = list(meta["choices"])
        elif meta.get("parse"):
            kwargs["type"] = meta["parse"]
        if meta.get("metavar"):
            kwargs["metavar"] = meta["metavar"]
        g.add_argument(flag_of(f), **kwargs)
        for alias in (a for a, named in aliases.items() if named == name):  # its other spelling, a key of its own
            g.add_argument("--" + alias.replace("_", "-"), **{**kwargs, "dest": alias,
                                                              "help": f"the same as {flag_of(f)}"})


def common_option_defaults() -> dict:
    """The options every strategy takes, with their one default: a run's config.yaml holds
    them even when not given (each strategy takes them, so the file still suits any
    strategy a later command line picks)."""
    return {name: uses[0][1].default for name, uses in _options_by_name().items()
            if len(uses) == len(REGISTRY) and len({f.default for _, f in uses}) == 1}


def strategy_options_from_args(args: argparse.Namespace) -> dict:
    """The strategy options the user gave (by whichever name), as keyword arguments for
    scaletrain.init."""
    return {name: getattr(args, name) for name in [*_options_by_name(), *_aliases()] if hasattr(args, name)}


def option_flags(options: dict) -> list[str]:
    """Strategy options as the flags that give them (`{"microbatches": 8}` -> `--microbatches 8`;
    a switch, an option whose default is false, as the bare flag)."""
    switches = {f.name for cls in REGISTRY.values() for f in declared(cls.Options) if f.default is False}
    argv = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if name in switches:
            argv += [flag] if value else []
        elif isinstance(value, bool):
            argv += [flag, str(value).lower()]
        elif value is not None:
            argv += [flag, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)]
    return argv
