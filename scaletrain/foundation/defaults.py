"""Every default setting, defined once and used by the library and the command line alike.

A run gets the same timeout, port, grace period or retention whether it was started with
`scaletrain train`, `scaletrain launch` or `scaletrain.init()`: each of those reads its
default from here, and the help texts quote these values.
"""

from __future__ import annotations

#: How long a rank waits for its peers (in a collective, at start-up) before naming the
#: missing ones and exiting (`--timeout`, `scaletrain.init(timeout=...)`), in seconds.
HANG_TIMEOUT_S = 600.0

#: How long a node waits for node 0's rendezvous to open (`--connect-timeout`), in seconds.
CONNECT_TIMEOUT_S = 300.0

#: The rendezvous address and port when nothing else says (torch's own convention).
MASTER_ADDR = "127.0.0.1"
MASTER_PORT = 29500

#: When one rank fails, the others get this long to end by themselves (their watchdogs
#: name the failure), then SIGTERM, this long again, then SIGKILL. Seconds.
STOP_GRACE_S = 5.0

#: A rank whose main thread keeps the GIL this long without a break after its program
#: destroyed the process group is frozen in torch's Gloo teardown deadlock, and is ended
#: (with status 0: its distributed work was done). Seconds.
TEARDOWN_GRACE_S = 10.0

#: Checkpoints kept in a run's folder (`--keep-checkpoints`, `run.checkpointer(keep=...)`).
KEEP_CHECKPOINTS = 2

#: Restarts of a failed group (`--max-restarts`).
MAX_RESTARTS = 0

#: The self-test of `scaletrain doctor` gives up after this many seconds.
SELF_TEST_TIMEOUT_S = 60.0

#: Checkpoints of a model that shards itself (fsdp) are written sharded, one file per rank,
#: from this size of model and optimizer state on (bytes); smaller ones as one whole file,
#: which any strategy on any number of processes reads without a shared folder.
SHARDED_CHECKPOINT_MIN_BYTES = 2**30

#: A training record (a plain line when stdout is not a terminal, a metrics.jsonl line, the
#: trackers' scalars) every this many steps (`--log-every-steps`) ...
LOG_EVERY_STEPS = 10

#: ... or every this many seconds, whichever comes first (`--log-every-seconds`).
LOG_EVERY_SECONDS = 60.0

#: `scaletrain bench` measures in rounds until its verdict is decided or this many seconds
#: of rounds are spent (`--budget`): on a 2-core machine a round of the default bench takes
#: about half a minute, and where a configuration runs close to the speedup that pays, the
#: rounds' noise here (about 10% per round) needs a dozen rounds to decide; a clear case
#: stops after 3 to 6 rounds, well before this.
BENCH_BUDGET_S = 360.0

#: Rounds a bench runs before its verdict may stop it (the interval of 2 rounds is wide and
#: rests on one degree of freedom), and the most it runs however fast rounds are.
BENCH_MIN_ROUNDS = 3
BENCH_MAX_ROUNDS = 50

#: A bench round during which processes other than the bench's kept more than this many
#: cores busy (on average over one of its jobs) is left out and run again
#: (`--max-other-load`): on 2 cores one such process turns the one-process runs' figures
#: upside down.
BENCH_MAX_OTHER_CORES = 0.25

#: The speedup over one process from which distributing counts as worth it (`--worth-at`):
#: below it the gain is what tuning one process (threads, batch size, compile) often gets,
#: without the extra processes, their start-up and their failure modes. It also has to stand
#: clear of measurement noise: on a shared machine one round's speedup moves by about 10%, so
#: a bar at 1.1× sits inside the noise of a configuration that is no faster than one process
#: (1.0–1.07× here) and the verdict would flip from run to run.
WORTH_AT_SPEEDUP = 1.2

#: Alternating rounds of `scaletrain plan`'s measurements (`--probe-rounds`): the spread of
#: the predictions over them is the plan's expected error.
PLAN_PROBE_ROUNDS = 3

#: Measured steps of a bench configuration or a plan's probe last at least this many seconds
#: (`--min-seconds`): `--steps` steps of a small model take a few milliseconds, at the mercy of
#: one hiccup of the machine.
BENCH_MEASURE_S = 1.5

#: `scaletrain plan` takes more rounds while the predictions' expected error is wider than
#: `--max-error` (a share), until the next round would end past `--budget` seconds; then, if
#: still wider, it says it cannot tell rather than name a best configuration.
PLAN_BUDGET_S = 180.0
PLAN_MAX_ERROR = 0.5

#: The configuration every run writes into its folder (`scaletrain train --config` reads it back;
#: `scaletrain report` takes an unfinished run's strategy and processes from it).
CONFIG_FILE = "config.yaml"

#: How the process groups of scaletrain's own background threads (the checkpoint writer) are
#: described to torch (`group_desc`): a hang's report tells their collectives from training's.
BACKGROUND_GROUP = "scaletrain background"

#: The hang timeout (seconds) of the processes of a measurement (`train --strategy auto`'s jobs):
#: `scaletrain.init` takes it where no `timeout` is given, and their launcher bounds start-up by it.
HANG_TIMEOUT_VAR = "SCALETRAIN_HANG_TIMEOUT"


def hang_timeout_s(environ=None) -> float:
    """HANG_TIMEOUT_VAR's seconds where it holds a positive number, else HANG_TIMEOUT_S."""
    import os

    try:
        seconds = float((os.environ if environ is None else environ).get(HANG_TIMEOUT_VAR, ""))
    except ValueError:
        return HANG_TIMEOUT_S
    return seconds if seconds > 0 else HANG_TIMEOUT_S
