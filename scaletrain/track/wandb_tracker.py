"""The Weights & Biases tracker: `wandb` itself, with its run folder in OUT/wandb.

Offline unless the run can reach W&B: without WANDB_MODE set, a run is online only when an
API key is configured (WANDB_API_KEY or `wandb login`) and api.wandb.ai answers within a
few seconds. An offline run keeps its whole history in OUT/wandb/offline-run-*/ and can be
uploaded later with `wandb sync`.
"""

from __future__ import annotations

import netrc
import os
import socket
import threading
from pathlib import Path
from typing import Any, Mapping, Optional

WANDB_HOST = "api.wandb.ai"
REACH_TIMEOUT_S = 3.0


class WandbTracker:
    def __init__(self, directory: Path, run_name: str):
        import wandb

        self._wandb = wandb
        mode = None if os.environ.get("WANDB_MODE") or _can_sync() else "offline"
        settings = wandb.Settings(console="off", disable_git=True, save_code=False, silent=True,
                                  x_disable_stats=True)  # no stdout capture, no system-metrics sampler
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(dir=str(directory), project=os.environ.get("WANDB_PROJECT") or "scaletrain",
                              name=run_name, mode=mode, settings=settings)
        self.offline = self.run.settings.mode == "offline"

    @property
    def folder(self) -> Path:
        """Where this run's files are (an offline run's folder is what `wandb sync` takes)."""
        return Path(self.run.dir).parent

    @property
    def where(self) -> str:
        if self.offline:
            return f"wandb: offline run in {self.folder} (upload it with: wandb sync {self.folder})"
        return f"wandb: {self.run.url or self.folder}"

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log({name: float(value) for name, value in metrics.items()}, step=step)

    def finish(self, summary: Optional[Mapping[str, Any]] = None) -> None:
        if summary is not None:
            self.run.summary.update(dict(summary))
        self.run.finish()


def _can_sync() -> bool:
    """An API key is configured and W&B's server answers: then wandb's own default (online)."""
    return _has_api_key() and _reachable(WANDB_HOST, 443, REACH_TIMEOUT_S)


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(WANDB_HOST) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _reachable(host: str, port: int, timeout: float) -> bool:
    # A name lookup is not bounded by a socket timeout: ask in a thread and stop waiting.
    answer: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(answer and answer[0])
