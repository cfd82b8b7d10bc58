"""Flags of `scaletrain train` for surviving failures: checkpoints, resuming, restarts, hangs."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Optional

from ..checkpoint import CHECKPOINTS_DIR, LAYOUTS, latest_checkpoint
from ..checkpoint.preflight import check_resumable
from ..environment import DistEnv
from ..defaults import HANG_TIMEOUT_S, KEEP_CHECKPOINTS, MAX_RESTARTS
from ..errors import UsageError
from ..fault.durations import RULE, format_duration
from ..train.report import SUMMARY_FILE
from .parsing import duration, non_negative_int, positive_int


duration.to_text = format_duration  # how a configuration file writes it, so that it reads back


def resume_source(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected auto or a checkpoint path, got an empty value")
    return text


def add_fault_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fault tolerance (see docs/fault-tolerance.md)")
    g.add_argument("--checkpoint-every", type=positive_int, default=0, metavar="STEPS",
                   help="save a checkpoint into OUT/checkpoints every STEPS training steps, and at the end")
    g.add_argument("--keep-checkpoints", type=positive_int, default=KEEP_CHECKPOINTS, metavar="K",
                   help=f"keep the newest K checkpoints (default {KEEP_CHECKPOINTS})")
    g.add_argument("--checkpoint-layout", choices=LAYOUTS, default="auto",
                   help="full: one file with the whole model, written by rank 0, readable by any strategy on any "
                        "number of processes; sharded: each rank writes its own share (no rank holds the whole "
                        "model; needs a folder all nodes share); auto (default): sharded for fsdp when the model's "
                        "state is 1 GiB or more, else full")
    g.add_argument("--checkpoint-async", action="store_true",
                   help="write checkpoints in the background: training stops only while the state is copied into "
                        "host memory (pinned on CUDA), and DCP's asynchronous save (or, for the full layout, rank "
                        "0's thread) writes it while training goes on; one is written at a time (the next waits, "
                        "saying so) and the last is finished before the run ends; a checkpoint becomes the newest "
                        "only once complete")
    g.add_argument("--resume", type=resume_source, metavar="auto|PATH",
                   help="auto: continue from the newest checkpoint in --out if there is one; PATH: a checkpoint "
                        "folder, a checkpoints folder or an earlier run's --out")
    g.add_argument("--max-restarts", type=non_negative_int, default=MAX_RESTARTS, metavar="K",
                   help="when a process dies, stop the group and restart it up to K times, resuming from the "
                        "last checkpoint (spawn; under torchrun use its --max-restarts)")
    g.add_argument("--allow-nonfinite", action="store_true",
                   help="keep training when the loss, gradients or weights become NaN or inf (default: stop at the "
                        "next check, every --log-every-steps steps and before every checkpoint, naming the step and "
                        "the likely cause); checkpoints of non-finite weights are never written")
    g.add_argument("--timeout", type=duration, default=HANG_TIMEOUT_S, metavar="DURATION",
                   help=f"how long a rank waits for its peers (at start-up and in every collective) before naming "
                        f"the missing ones and exiting; {RULE} (default {format_duration(HANG_TIMEOUT_S)})")


def fault_config(args: argparse.Namespace) -> dict:
    """The TrainConfig fields of these flags. A process restarted by torchrun's agent resumes
    from the newest checkpoint by itself, as one restarted by scaletrain does."""
    return {"checkpoint_every": args.checkpoint_every, "keep_checkpoints": args.keep_checkpoints,
            "checkpoint_layout": args.checkpoint_layout, "checkpoint_async": args.checkpoint_async,
            "resume": resume_after_agent_restart(args.resume, args.checkpoint_every, os.environ),
            "timeout_seconds": args.timeout, "allow_nonfinite": args.allow_nonfinite}


def resume_after_agent_restart(resume: Optional[str], checkpoint_every: int, environ) -> Optional[str]:
    """"auto" for a process that torchrun's agent restarted (TORCHELASTIC_RESTART_COUNT > 0)
    in a run with checkpoints, when no --resume was given; else `resume`."""
    restarted = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0
    return "auto" if resume is None and restarted and checkpoint_every else resume


def check_fault_flags(args: argparse.Namespace, env: DistEnv, out: Optional[Path]) -> None:
    """What can be checked before any process starts (or, under a launcher, before joining)."""
    if env.launched and out is None and (args.checkpoint_every or args.resume == "auto"):
        raise UsageError("--checkpoint-every and --resume auto need a fixed --out under a launcher (every rank and "
                         "every restart must find the same folder); add --out DIR")
    if args.resume not in (None, "auto") and not Path(args.resume).expanduser().exists():
        raise UsageError(f"--resume {args.resume}: no such file or folder; name a checkpoint folder, a "
                         "checkpoints folder or an earlier run's --out (or use --resume auto)")


def check_resume(args: argparse.Namespace, out: Path, model, facts: dict, epochs: int) -> list[str]:
    """In the parent, before anything starts: the run in --out can be continued (--resume
    auto), and the checkpoint a resume would use verifies, fits this model and these
    settings (else one line). Returns notes to show."""
    if args.resume is None:
        return []
    auto = args.resume == "auto"
    if auto:
        check_continuable(out, epochs, getattr(args, "max_steps", None))
    source = out / CHECKPOINTS_DIR if auto else Path(args.resume).expanduser()
    try:
        _folder, notes = check_resumable(source, model, facts, auto)
    except UsageError as exc:
        raise UsageError(f"--resume {args.resume}: {exc.raw}") from None
    return notes


def check_continuable(out: Path, epochs: Optional[int], max_steps: Optional[int] = None) -> None:
    """--resume auto writes into --out only to continue the run there: a finished run (its
    summary.json written) continues only from a checkpoint, and only to train more epochs
    than it did; otherwise it would be overwritten (summary) or appended to (metrics)."""
    summary = _finished_summary(out)
    if summary is None:
        return  # a new folder, or a run that stopped before its end: continue it
    done = summary.get("epochs")
    if latest_checkpoint(out / CHECKPOINTS_DIR) is None:
        raise UsageError(f"--resume auto: {out} holds a finished run ({SUMMARY_FILE} written) and no checkpoint to "
                         "continue it from; choose a new --out (or --resume PATH from another run)")
    steps = summary.get("optimizer_steps")
    if max_steps is not None and isinstance(steps, int) and max_steps <= steps:
        raise UsageError(f"--resume auto: the run in {out} already ended at optimizer step {steps} ({SUMMARY_FILE} "
                         f"written); give --max-steps {steps + 1} or more to train it further, or choose a new --out")
    if max_steps is None and epochs is not None and isinstance(done, int) and epochs <= done:
        raise UsageError(f"--resume auto: the run in {out} already ended its {done} epoch(s) ({SUMMARY_FILE} "
                         f"written); give --epochs {done + 1} or more to train it further, or choose a new --out")


def _finished_summary(out: Path) -> Optional[dict]:
    path = out / SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}  # finished (the summary is written last), whatever happened to the file since
    return summary if isinstance(summary, dict) else {}


def out_may_hold_files(args: argparse.Namespace, out: Path) -> bool:
    """--resume auto continues the run in --out, so that folder may hold its files."""
    return args.resume == "auto" and out.is_dir()


def resume_on_restart(resume: Optional[str], out: Path) -> Optional[str]:
    """What a restarted group resumes: the newest checkpoint in --out when there is one
    (else whatever --resume the run had)."""
    return "auto" if latest_checkpoint(out / CHECKPOINTS_DIR) is not None else resume


def describe_resume(out: Path) -> str:
    found = latest_checkpoint(out / CHECKPOINTS_DIR)
    return f"from {found}" if found is not None else "from the start (no checkpoint written yet)"
