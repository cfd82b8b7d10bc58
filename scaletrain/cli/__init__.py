"""The `scaletrain` command: one subcommand per module, each with NAME, HELP,
add_arguments(parser) and run(args) -> exit status."""

from __future__ import annotations

import sys
from typing import Optional

from ..errors import UsageError
from . import bench_cmd, comm_cmd, doctor_cmd, env_cmd, launch_cmd, plan_cmd, report_cmd, train_cmd
from .parsing import OneLineParser, fail, flag_names

COMMANDS = (train_cmd, launch_cmd, env_cmd, doctor_cmd, bench_cmd, comm_cmd, plan_cmd, report_cmd)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="scaletrain",
                           description="Run PyTorch training on many processes and machines, and measure whether it pays.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.NAME, help=command.HELP, description=command.HELP)
        command.add_arguments(p)
        p.set_defaults(handler=command.run)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return args.handler(args)
    except UsageError as exc:  # spelt with the flags the user types, not the library's keywords
        return fail(exc.for_command_line(*flag_names(parser)))
    except KeyboardInterrupt:
        return 130
