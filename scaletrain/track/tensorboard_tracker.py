"""The TensorBoard tracker: event files in OUT/tensorboard, written by torch's own
`torch.utils.tensorboard.SummaryWriter` (which needs the `tensorboard` package).

    tensorboard --logdir OUT/tensorboard          # several runs: --logdir runs/
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Mapping, Optional

from ..foundation.safe_files import is_disk_full


class TensorBoardTracker:
    def __init__(self, directory: Path, run_name: str):
        from torch.utils.tensorboard import SummaryWriter

        _quiet_writer_threads()
        self._writer_class = SummaryWriter
        self.writer = SummaryWriter(log_dir=str(Path(directory) / "tensorboard"))
        self._last_step = 0

    def resumed(self, step: int) -> None:
        """A new event file whose first event tells TensorBoard's readers to forget the
        earlier files' events after `step` (they are about to be written again)."""
        log_dir = self.writer.log_dir
        self.writer.close()
        self.writer = self._writer_class(log_dir=log_dir, purge_step=step + 1)

    @property
    def where(self) -> str:
        return f"tensorboard: {self.writer.log_dir} (tensorboard --logdir {self.writer.log_dir})"

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.writer.add_text("config", _as_markdown_code(config), global_step=0)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, float(value), global_step=step)
        self._last_step = step

    def finish(self, summary: Optional[Mapping[str, Any]] = None) -> None:
        if summary is not None:
            self.writer.add_text("summary", _as_markdown_code(summary), global_step=self._last_step)
        self.writer.close()


_quieted = False


def _quiet_writer_threads() -> None:
    """TensorBoard writes from a thread of its own; a write that fails there (a full disk)
    is raised again by the next call in the run's thread, where it becomes one line
    (scaletrain.foundation.safe_files.DiskFull). Python would also print it from the dying thread as a
    traceback: not for a full disk."""
    global _quieted
    if _quieted:
        return
    previous = threading.excepthook

    def hook(args) -> None:
        if type(args.thread).__module__.startswith("tensorboard.") and is_disk_full(args.exc_value):
            return
        previous(args)

    threading.excepthook = hook
    _quieted = True


def _as_markdown_code(values: Mapping[str, Any]) -> str:
    # TensorBoard renders text as Markdown: indented lines stay a readable block.
    text = json.dumps(values, indent=2, sort_keys=True, default=str)
    return "\n".join("    " + line for line in text.splitlines())
