"""`scaletrain train` flags for watching a run: experiment trackers and how often the
training loop records a step (a plain line in a log, metrics.jsonl, the trackers)."""

from __future__ import annotations

import argparse

from ..defaults import LOG_EVERY_SECONDS, LOG_EVERY_STEPS
from ..track import TRACKER_NAMES, UNREACHABLE_CHOICES
from .parsing import positive_float, positive_int


def add_track_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("watching the run (see docs/tracking.md)")
    g.add_argument("--tracker", action="append", choices=TRACKER_NAMES, metavar="NAME",
                   help="also record the run with an experiment tracker, on rank 0: tensorboard (OUT/tensorboard), "
                        "wandb (OUT/wandb; offline without a W&B login or network), mlflow (OUT/mlruns, or "
                        "MLFLOW_TRACKING_URI), csv (OUT/csv); give it several times for several")
    g.add_argument("--if-tracker-unreachable", choices=UNREACHABLE_CHOICES, default="stop",
                   help="a tracker whose server does not answer (MLFLOW_TRACKING_URI down) is found in seconds, "
                        "before training: stop (default) refuses the run in one line; skip trains without it, "
                        "with a note")
    g.add_argument("--log-every-steps", type=positive_int, default=LOG_EVERY_STEPS, metavar="N",
                   help=f"record the training loss, learning rate and samples/s every N steps (default "
                        f"{LOG_EVERY_STEPS}) or every --log-every-seconds, whichever comes first: a plain line when "
                        "stdout is not a terminal, a step line in metrics.jsonl, the trackers' scalars")
    g.add_argument("--log-every-seconds", type=positive_float, default=LOG_EVERY_SECONDS, metavar="T",
                   help=f"... or every T seconds (default {LOG_EVERY_SECONDS:g})")


def track_config(args: argparse.Namespace) -> dict:
    """The TrainConfig fields of these flags."""
    return {"trackers": list(dict.fromkeys(args.tracker or [])), "log_every_steps": args.log_every_steps,
            "log_every_seconds": args.log_every_seconds}
