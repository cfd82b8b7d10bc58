"""`scaletrain doctor`: checks a launch before it is made; exit status 1 if anything is wrong."""

from __future__ import annotations

import argparse
import json
import os

from ..foundation.defaults import MASTER_PORT, SELF_TEST_TIMEOUT_S
from ..foundation.durations import RULE
from ..foundation.errors import UsageError
from ..process.environment import detect
from .parsing import duration, port, positive_int

NAME = "doctor"
HELP = "check this machine for a launch: backends, hostname, master address and port, interface, a 2-rank self-test"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master-addr", help="rank 0's address (default: MASTER_ADDR, else 127.0.0.1)")
    p.add_argument("--master-port", type=port, help=f"the rendezvous port (default: MASTER_PORT, else {MASTER_PORT})")
    p.add_argument("--nnodes", type=positive_int, help="machines in the job (default: as detected, else 1)")
    p.add_argument("--node-rank", type=int, help="this machine's index; 0 is the master's (default: as detected)")
    p.add_argument("--backend", choices=["gloo", "nccl", "mpi", "ccl"], help="the backend the job will use")
    p.add_argument("--no-self-test", action="store_true", help="skip the 2-process all-reduce")
    p.add_argument("--self-test-timeout", type=duration, default=SELF_TEST_TIMEOUT_S, metavar="DURATION",
                   help=f"deadline of the self-test; {RULE} (default {SELF_TEST_TIMEOUT_S:g}s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ..doctor import checks

    env = detect(os.environ)
    nnodes = args.nnodes or env.nnodes
    node_rank = env.node_rank if args.node_rank is None else args.node_rank
    if not 0 <= node_rank < nnodes:
        raise UsageError(f"--node-rank {node_rank} must be from 0 to {nnodes - 1} (--nnodes {nnodes})")
    plan = checks.Plan(master_addr=args.master_addr or env.master_addr, master_port=args.master_port or env.master_port,
                       nnodes=nnodes, backend=args.backend, is_master_node=node_rank == 0)
    findings = [*checks.check_backends(plan), *checks.check_hostname(plan), *checks.check_master(plan),
                *checks.check_allocator()]
    if not args.no_self_test:
        findings += checks.check_self_test(args.backend, args.self_test_timeout)
    problems = [f for f in findings if f.level == checks.PROBLEM]
    if args.json:
        print(json.dumps({"ok": not problems, "findings": [f.__dict__ for f in findings]}, indent=2))
    else:
        for f in findings:
            print(f"{f.level:8} {f.what}")
            if f.fix:
                print(f"{'':8} fix: {f.fix}")
        print(f"{len(problems)} problem(s) found" if problems else "no problems found")
    return 1 if problems else 0
