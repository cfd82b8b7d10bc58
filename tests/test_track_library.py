"""Trackers through the library: `scaletrain.init(trackers=[...])`, `run.log`, `run.log_config`,
names and users' own tracker objects side by side. One process, no launcher."""

from __future__ import annotations

import pytest
import torch

import scaletrain
from scaletrain.foundation.errors import UsageError


class Recorder:
    """A user's own tracker: any object with these three methods."""

    def __init__(self):
        self.calls = []

    def log_config(self, config):
        self.calls.append(("config", dict(config)))

    def log(self, metrics, step):
        self.calls.append(("log", dict(metrics), step))

    def finish(self, summary=None):
        self.calls.append(("finish", summary))


def test_names_and_objects_record_what_run_log_gives(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    mine = Recorder()
    with scaletrain.init(strategy="single", trackers=["csv", "tensorboard", mine], tracker_dir=tmp_path) as run:
        run.log_config({"lr": 0.1, "model": {"width": 8}})
        run.log({"train/loss": torch.tensor(0.5), "train/lr": 0.1}, step=3)
        with pytest.raises(TypeError, match="'note' must be a number"):
            run.log({"note": "fast"})
        run.log({"train/loss": 0.25})  # the step defaults to the train_step calls so far
    assert mine.calls == [("config", {"lr": 0.1, "model": {"width": 8}}),
                          ("log", {"train/loss": 0.5, "train/lr": 0.1}, 3),
                          ("log", {"train/loss": 0.25}, 0), ("finish", None)]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(3, 0.5), (0, 0.25)]
    rows = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    assert [row.rsplit(",", 1)[0] for row in rows] == ["step,name,value", "3,train/loss,0.5", "3,train/lr,0.1",
                                                       "0,train/loss,0.25"]
    assert "model.width,8" in (tmp_path / "csv" / "config.csv").read_text()


def test_unknown_tracker_is_refused_before_anything_starts():
    with pytest.raises(UsageError, match="unknown tracker 'neptune'; choose from: tensorboard, wandb, mlflow, csv"):
        scaletrain.init(strategy="single", trackers=["neptune"])
    with pytest.raises(UsageError, match="an object with log_config, log and finish methods"):
        scaletrain.init(strategy="single", trackers=[object()])
