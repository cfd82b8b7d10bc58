"""The MLflow tracker: MLflow's own client (`mlflow` or `mlflow-skinny`).

Where the run goes: MLFLOW_TRACKING_URI when set (a server, a database), else a local file
store in OUT/mlruns. MLflow 3 keeps that file store only on request (MLFLOW_ALLOW_FILE_STORE),
which is set for this process when the file store is used. The experiment is
MLFLOW_EXPERIMENT_NAME, else "scaletrain"; the run is named after the output folder.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import urlencode, urlparse

import yaml

from ..foundation.errors import UsageError
from .base import flatten, numbers

#: MLflow refuses longer parameter values.
PARAM_LIMIT = 500


def tracking_uri(directory: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or (Path(directory).absolute() / "mlruns").as_uri()


#: Seconds the tracking server has to answer one request. MLflow's own client waits 120 s a
#: request and retries a server that is down for minutes before it fails with a traceback.
ANSWER_S = 5.0
#: The request that tells an MLflow server from anything else listening there: it answers
#: with a JSON object (the experiment, or an error such as RESOURCE_DOES_NOT_EXIST).
PROBE_PATH = "/api/2.0/mlflow/experiments/get-by-name"


def experiment_name(environ=os.environ) -> str:
    return environ.get("MLFLOW_EXPERIMENT_NAME") or "scaletrain"


def server_problem(environ=os.environ) -> Optional[str]:
    """Why the tracking server MLFLOW_TRACKING_URI names cannot be used, or None (no server
    named: a file store, a database; or it answered as MLflow does). One request, answered
    within ANSWER_S or not at all: a server that accepts the connection and then says nothing
    (frozen, or a port-forward to a pod that is gone) counts as down."""
    uri = environ.get("MLFLOW_TRACKING_URI") or ""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None
    where = f"the MLflow tracking server at {uri} (MLFLOW_TRACKING_URI)"
    url = uri.rstrip("/") + PROBE_PATH + "?" + urlencode({"experiment_name": experiment_name(environ)})
    answer = _ask(url, environ)
    if answer is None:
        return (f"{where} accepts connections but sent no answer within {ANSWER_S:g} s (a frozen server, or a "
                "port-forward to nothing): restart it")
    status, body, error = answer
    if error is not None:
        return f"{where} cannot be reached ({error}): start it"
    if status in (401, 403):
        return (f"{where} refused the request (HTTP {status}): give its credentials in MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN")
    try:
        is_record = isinstance(json.loads(body), dict)
    except ValueError:
        is_record = False
    if not is_record:
        shown = body[:60].decode("utf-8", "replace").strip() + ("…" if len(body) > 60 else "")
        return (f"{uri} (MLFLOW_TRACKING_URI) answered HTTP {status} with {'nothing' if not body else repr(shown)}, "
                "not MLflow's JSON: it is not an MLflow tracking server; point MLFLOW_TRACKING_URI at one")
    return None


def _ask(url: str, environ) -> Optional[tuple]:
    """(HTTP status, body, None), (None, None, why it failed), or None when nothing came back
    within ANSWER_S. In a thread, because a name lookup or a server that trickles bytes is
    not bounded by a socket timeout."""
    request = urllib.request.Request(url, headers={"Accept": "application/json", **_credentials(environ)})
    context = None
    if url.startswith("https:"):
        insecure = (environ.get("MLFLOW_TRACKING_INSECURE_TLS") or "").lower() == "true"
        context = ssl._create_unverified_context() if insecure else ssl.create_default_context(
            cafile=environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)
    box: list = []

    def ask() -> None:
        try:
            with urllib.request.urlopen(request, timeout=ANSWER_S, context=context) as response:
                box.append((response.status, response.read(1 << 16), None))
        except urllib.error.HTTPError as exc:  # an answer all the same: MLflow's errors are JSON
            box.append((exc.code, exc.read(1 << 16), None))
        except (OSError, ValueError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                return  # nothing came back in time
            box.append((None, None, getattr(reason, "strerror", None) or str(reason)))

    thread = threading.Thread(target=ask, name="scaletrain-mlflow-probe", daemon=True)
    thread.start()
    thread.join(ANSWER_S + 0.5)
    return box[0] if box else None


def _credentials(environ) -> dict:
    if environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {environ['MLFLOW_TRACKING_TOKEN']}"}
    user, password = environ.get("MLFLOW_TRACKING_USERNAME"), environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


#: While the tracker opens its run (the run's first requests), MLflow's client is held to
#: this: a server that stops answering then costs seconds, not minutes of retries. Values the
#: user set win; the run's later requests get MLflow's own settings.
OPENING_LIMITS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(ANSWER_S)), "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1"}


@contextlib.contextmanager
def _opening_limits():
    added = {k: v for k, v in OPENING_LIMITS.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


class MlflowTracker:
    def __init__(self, directory: Path, run_name: str):
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric, self._param = Metric, Param
        self.uri = tracking_uri(directory)
        if self.uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=self.uri)
        name = experiment_name()
        try:
            with _opening_limits():
                experiment = self.client.get_experiment_by_name(name)
                experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
                self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        except OSError:
            raise  # a full disk under a file store: the trackers' own one line
        except Exception as exc:  # noqa: BLE001 - whatever MLflow's client raised is the server's answer
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise UsageError(f"--tracker mlflow: {self.uri} did not take the run's first requests within "
                             f"{ANSWER_S:g} s a try ({type(exc).__name__}: {first}); check the server, or train "
                             "without it: --if-tracker-unreachable skip") from None
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
