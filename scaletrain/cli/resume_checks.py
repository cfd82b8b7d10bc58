"""What `scaletrain train` checks of its fault-tolerance settings before any process starts (or,
under a launcher, before joining): a resume's checkpoint, a finished run's folder, a fixed
output folder where ranks and restarts must find the same one; and what a restarted group
resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from ..checkpoint import CHECKPOINTS_DIR, latest_checkpoint
from ..checkpoint.preflight import check_resumable
from ..foundation.errors import UsageError
from ..foundation.text_values import AUTO
from ..process.environment import DistEnv
from ..train.config import TrainConfig
from ..train.report import SUMMARY_FILE


def check_fault_flags(config: TrainConfig, env: DistEnv) -> None:
    """What can be checked before any process starts (or, under a launcher, before joining)."""
    if env.launched and config.out is None and (config.checkpoint_every or config.resume == AUTO):
        raise UsageError("--checkpoint-every and --resume auto need a fixed --out under a launcher (every rank and "
                         "every restart must find the same folder); add --out DIR")
    if config.checkpoint_async and not config.checkpoint_every:  # it would write nothing, and say nothing
        raise UsageError("--checkpoint-async writes the checkpoints of --checkpoint-every in the background, and "
                         "without --checkpoint-every there are none; add --checkpoint-every STEPS (or drop "
                         "--checkpoint-async)")
    if config.resume not in (None, "auto") and not Path(config.resume).expanduser().exists():
        raise UsageError(f"--resume {config.resume}: no such file or folder; name a checkpoint folder, a "
                         "checkpoints folder or an earlier run's --out (or use --resume auto)")


def check_resume(config: TrainConfig, model, facts: dict) -> list[str]:
    """In the parent, before anything starts: the run in --out can be continued (--resume
    auto), and the checkpoint a resume would use verifies, fits this model and these
    settings (else one line). Returns notes to show."""
    if config.resume is None:
        return []
    auto = config.resume == AUTO
    if auto:
        check_continuable(config.out, config.epochs, config.max_steps)
    source = config.out / CHECKPOINTS_DIR if auto else Path(config.resume).expanduser()
    try:
        _folder, notes = check_resumable(source, model, facts, auto)
    except UsageError as exc:
        raise UsageError(f"--resume {config.resume}: {exc.raw}") from None
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


def out_may_hold_files(config: TrainConfig) -> bool:
    """--resume auto continues the run in --out, so that folder may hold its files."""
    return config.resume == AUTO and config.out.is_dir()


def resume_on_restart(resume: Optional[str], out: Path) -> Optional[str]:
    """What a restarted group resumes: the newest checkpoint in --out when there is one
    (else whatever --resume the run had)."""
    return "auto" if latest_checkpoint(out / CHECKPOINTS_DIR) is not None else resume


def describe_resume(out: Path) -> str:
    found = latest_checkpoint(out / CHECKPOINTS_DIR)
    return f"from {found}" if found is not None else "from the start (no checkpoint written yet)"
