"""Users' own functions named as `module:function` (like `mypkg.models:build`), imported from
the current folder as `python -m` would: the one place that turns such a name into a call."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable

from .errors import UsageError


def load_factory(spec: str, flag: str) -> Callable[[], Any]:
    """Imports `module:function`; every failure is one UsageError naming the flag."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise UsageError(f"{flag} {spec!r}: expected module:function, e.g. {flag} mymodels:build_model")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the current folder is importable
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while importing
        raise UsageError(f"{flag} {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc}); "
                         "run from the folder that holds it or add that folder to PYTHONPATH") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise UsageError(f"{flag} {spec!r}: module {module_name!r} has no function {func_name!r}")
    return func
