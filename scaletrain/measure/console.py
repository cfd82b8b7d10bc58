"""A rich console for tables: the terminal's width on a terminal, a wide fixed one when the
output goes to a file or a pipe (rich's 80 columns would cut the tables' words)."""

from __future__ import annotations

import sys

from rich.console import Console


def table_console() -> Console:
    return Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)
