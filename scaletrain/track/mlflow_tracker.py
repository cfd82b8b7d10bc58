"""The MLflow tracker: MLflow's own client (`mlflow` or `mlflow-skinny`).

Where the run goes: MLFLOW_TRACKING_URI when set (a server, a database), else a local file
store in OUT/mlruns. MLflow 3 keeps that file store only on request (MLFLOW_ALLOW_FILE_STORE),
which is set for this process when the file store is used. The experiment is
MLFLOW_EXPERIMENT_NAME, else "scaletrain"; the run is named after the output folder.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import urlparse

import yaml

from .base import flatten, numbers

#: MLflow refuses longer parameter values.
PARAM_LIMIT = 500


def tracking_uri(directory: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or (Path(directory).absolute() / "mlruns").as_uri()


#: Seconds to wait for the tracking server to accept a connection. MLflow's own client
#: retries a server that is down for minutes before it fails with a traceback.
ANSWER_S = 5.0


def server_problem(environ=os.environ) -> Optional[str]:
    """Why the tracking server MLFLOW_TRACKING_URI names cannot be reached, or None (no
    server named: a file store, a database; or it accepts connections)."""
    uri = environ.get("MLFLOW_TRACKING_URI") or ""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        with socket.create_connection((parsed.hostname, port), timeout=ANSWER_S):
            return None
    except (OSError, ValueError) as exc:
        reason = "no answer" if isinstance(exc, socket.timeout) else (getattr(exc, "strerror", None) or str(exc))
        return f"the MLflow tracking server at {uri} (MLFLOW_TRACKING_URI) cannot be reached ({reason})"


class MlflowTracker:
    def __init__(self, directory: Path, run_name: str):
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric, self._param = Metric, Param
        self.uri = tracking_uri(directory)
        if self.uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=self.uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "scaletrain"
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        self._last_step = 0

    @property
    def where(self) -> str:
        return f"mlflow: run {self.run_id} in {self.uri}"

    def log_config(self, config: Mapping[str, Any]) -> None:
        params = [self._param(key, str(value)[:PARAM_LIMIT]) for key, value in flatten(config).items()]
        self.client.log_batch(self.run_id, params=params)
        self.client.log_text(self.run_id, yaml.safe_dump(dict(config), sort_keys=False), "config.yaml")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[self._metric(name, float(value), now, step)
                                                    for name, value in metrics.items()])
        self._last_step = step

    def finish(self, summary: Optional[Mapping[str, Any]] = None) -> None:
        if summary is not None:
            self.client.log_dict(self.run_id, dict(summary), "summary.json")
            self.log({f"summary/{key}": value for key, value in numbers(summary).items()}, self._last_step)
        self.client.set_terminated(self.run_id, "FINISHED")
