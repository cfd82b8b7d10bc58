"""The `scaletrain` command: one subcommand per module, each with add_arguments(parser) and
run(args) -> exit status (and HELP, its description); a command whose processes can be the
ranks of a job a launcher started (train, bench) has run_rank(args) for that role too.

Only the chosen subcommand's module is imported and only its options are built: several of
them need torch (choices of strategies, workloads), and importing torch for
`scaletrain --help` or `scaletrain env --help` would take seconds.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from typing import Optional

from ..foundation.errors import UsageError
from ..launchers.interrupts import Deferred, Stopped, sigint_as_python, signal_name, stop_signals
from ..version import __version__
from .parsing import OneLineParser, fail, flag_names

# name -> (module, one line for `scaletrain --help`)
COMMANDS = {
    "train": ("train_cmd", "train a model (the built-in digits CNN by default) with a strategy on N processes"),
    "launch": ("launch_cmd", "run your script or module on N processes per node × M nodes (spawn, torchrun, "
                             "Open MPI, Slurm)"),
    "env": ("env_cmd", "show the detected launcher, ranks and master, backends, devices and threads"),
    "doctor": ("doctor_cmd", "check this machine for a launch: backends, hostname, master address and port, "
                             "interface, a 2-rank self-test"),
    "bench": ("bench_cmd", "measure speedup, efficiency, time breakdown and accuracy of strategies"),
    "comm": ("comm_cmd", "benchmark the collectives: time, algorithm and bus bandwidth"),
    "plan": ("plan_cmd", "predict speedup, efficiency and memory per device, before running"),
    "calibrate": ("calibrate_cmd", "measure this GPU's kernels and write a hardware profile of it for plan --hardware"),
    "report": ("report_cmd", "compare finished runs: a table of their settings and results, and plots"),
}


def command_module(name: str):
    return importlib.import_module(f".{COMMANDS[name][0]}", __name__)


def chosen_command(argv: list[str]) -> Optional[str]:
    """The subcommand named on the command line: the first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(only: Optional[str] = None) -> OneLineParser:
    """The parser; with `only`, the options of that subcommand alone are built (the others
    are listed by name, so a wrong name is still refused with the list of valid ones)."""
    parser = OneLineParser(prog="scaletrain",
                           description="Run PyTorch training on many processes and machines, and measure whether it pays.")
    parser.add_argument("--version", action="version", version=f"scaletrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, summary) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=summary, add_help=False)
            continue
        module = command_module(name)
        p = sub.add_parser(name, help=summary, description=getattr(module, "HELP", summary))
        module.add_arguments(p)
        p.set_defaults(handler=module.run, rank_handler=getattr(module, "run_rank", module.run))
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Runs a command; its exit status. Ctrl-C, SIGTERM and SIGHUP end it with 130, 143 and
    129 and one line (none in a rank: its launcher says it once), never a traceback."""
    from ..launchers import warm
    from ..process.startup_timeline import mark, process_started

    rank = _launched()
    if not rank:
        mark("command: process started", process_started())
        mark("command: scaletrain's command line entered")
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    name = chosen_command(argv)
    try:
        # Ctrl-C, SIGTERM and SIGHUP wait for torch's import to end (see Deferred), then stop
        # the command; any time after, they stop it at once.
        with Deferred() if not rank else contextlib.nullcontext():
            if not rank:  # before any process starts: the allocator they inherit (and this one runs)
                from .allocator_choice import prepare
                from .train_warm_up import ranks_to_warm, trains_here

                # Started again with the allocator only where this process is the command
                # (argv from its own command line): main(argv) called from other code must not
                # replace that code's process.
                prepare(name, argv, trains_here=name == "train" and trains_here(argv), own_process=own_process)
            if name == "train" and not rank:
                warm.warm_up(ranks_to_warm(argv))  # its ranks import torch while this process does
            if name in NEED_TORCH:
                import torch  # noqa: F401

                mark("command: torch imported") if not rank else None
            parser = build_parser(name if name in COMMANDS else "")
        if rank:
            sigint_as_python()
        with stop_signals() if not rank else contextlib.nullcontext():
            return _run(parser, argv, rank)
    except KeyboardInterrupt:
        return _stopped(Stopped(signal.SIGINT), rank)
    except Stopped as exc:
        return _stopped(exc, rank)
    finally:
        warm.discard()


#: Commands that import torch: before their flags are read, so that the import happens
#: where a signal cannot break it.
NEED_TORCH = frozenset({"train", "bench", "plan", "comm", "calibrate"})


def _run(parser: OneLineParser, argv: list[str], rank: bool = False) -> int:
    if chosen_command(argv) in ("launch", "train"):
        from .launch_options import glue_launcher_args

        argv = glue_launcher_args(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return (args.rank_handler if rank else args.handler)(args)
    except UsageError as exc:  # spelt with the flags the user types, not the library's keywords
        if getattr(exc, "said", False):  # a job it started said the one line already
            return 2
        return fail(exc.for_command_line(*flag_names(parser)))


def _stopped(exc: Stopped, rank: bool) -> int:
    if not (rank or exc.said):
        print(f"scaletrain: stopped by {signal_name(exc.signum)}", file=sys.stderr, flush=True)
    return exc.status


def _launched() -> bool:
    """Whether this process is one rank of a launched job (detection reads the launchers'
    variables; a contradiction among them is reported by the command itself)."""
    from ..process.environment import detect

    try:
        return detect(os.environ).launched
    except UsageError:
        return False
