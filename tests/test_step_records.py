"""When the trainer records a step and what the record says (a clock of our own, no
training), and which metrics.jsonl records a resume keeps."""

from __future__ import annotations

import json

import pytest

from scaletrain.train.report import METRICS_FILE, Reporter
from scaletrain.train.steps import StepRecorder, format_eta


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recorder(clock, **kwargs) -> StepRecorder:
    options = dict(every_steps=10, every_seconds=30.0, total_steps=100, first_step=0, data_parallel_size=2,
                   loss_is_local=True)
    return StepRecorder(**{**options, **kwargs}, clock=clock)


def test_every_n_steps_or_every_t_seconds_whichever_first():
    clock = Clock()
    steps = recorder(clock)
    steps.begin_epoch(0.0, 0, 0)
    assert [s for s in range(1, 25) if steps.due(s)] == [10, 20]
    clock.now += 31  # slow steps: T seconds pass before N steps do
    assert steps.due(3)
    steps.record(3, 1, 2, loss_sum=3.0, steps=3, samples=96, lr=0.1)
    assert not steps.due(4) and steps.due(10)


def test_record_covers_the_steps_since_the_previous_one():
    clock = Clock()
    steps = recorder(clock)
    steps.begin_epoch(0.0, 0, 0)
    clock.now += 2.0
    first = steps.record(10, 1, 2, loss_sum=20.0, steps=10, samples=320, lr=0.002)
    assert first == {"kind": "step", "step": 10, "total_steps": 100, "epoch": 1, "epochs": 2, "lr": 0.002,
                     "samples_per_second": 320 * 2 / 2.0, "eta_seconds": 90 * 0.2, "train_loss": 2.0}
    clock.now += 1.0
    second = steps.record(20, 1, 2, loss_sum=25.0, steps=20, samples=640, lr=0.002)
    assert second["train_loss"] == 0.5 and second["samples_per_second"] == 640.0
    assert second["eta_seconds"] == pytest.approx(80 * 3.0 / 20)


def test_resumed_epoch_and_a_rank_without_the_loss():
    clock = Clock()
    steps = recorder(clock, first_step=40, loss_is_local=False)
    steps.begin_epoch(8.0, 40, 0)  # a resumed epoch: its running totals do not start at zero
    clock.now += 1.0
    record = steps.record(50, 2, 2, loss_sum=9.0, steps=50, samples=320, lr=None)
    assert "train_loss" not in record  # a pipeline's first stage computes no loss
    assert record["eta_seconds"] == pytest.approx(50 * 1.0 / 10)


@pytest.mark.parametrize("seconds, text", [(None, "?"), (0.46, "0.5s"), (42, "42s"), (65, "1m05s"),
                                           (3725, "1h02m05s")])
def test_format_eta(seconds, text):
    assert format_eta(seconds) == text


def test_resume_keeps_only_what_was_done_before_its_checkpoint(tmp_path):
    records = [{"epoch": 1, "train_loss": 1.0},  # a line written before records had a kind
               {"kind": "step", "step": 10, "epoch": 2, "wall_seconds": 5.0},
               {"kind": "epoch", "step": 20, "epoch": 2, "wall_seconds": 6.0},
               {"kind": "step", "step": 30, "epoch": 3, "wall_seconds": 7.0},
               {"kind": "epoch", "step": 40, "epoch": 3, "wall_seconds": 8.0}]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records) + '{"kind": "st')
    reporter = Reporter(True, tmp_path)
    reporter.start_at(step=20, epoch=3)  # the checkpoint: the last step of epoch 2
    kept = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert kept == records[:3] and reporter.wall_offset == 6.0
    reporter.epoch({"kind": "epoch", "step": 20, "epoch": 2, "epochs": 3, "train_loss": 0.5, "eval_loss": 0.4,
                    "eval_accuracy": 0.9, "samples_per_second": 0.0})  # epoch 2 again: recorded already
    assert len((tmp_path / METRICS_FILE).read_text().splitlines()) == 3


def test_an_epoch_resumed_at_its_end_is_not_reported_at_0_samples_per_second(tmp_path, capsys):
    """A resume from the checkpoint at an epoch's last step, into a new folder: the epoch's
    held-out figures are recorded, its speed is not made up."""
    reporter = Reporter(True, tmp_path)
    reporter.start_at(45, 1)
    reporter.epoch({"kind": "epoch", "epoch": 1, "epochs": 2, "step": 45, "train_loss": 0.5, "eval_loss": 0.4,
                    "eval_accuracy": 0.9, "eval_samples": 10, "samples_per_second": 0.0, "epoch_seconds": 0.01,
                    "lr": 0.1, "wall_seconds": 3.0})
    line = capsys.readouterr().out.strip()
    assert line.endswith("trained before the resume") and "0 samples/s" not in line, line
    (record,) = [json.loads(text) for text in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert record["samples_per_second"] is None and record["eval_accuracy"] == 0.9


def test_a_note_naming_a_setting_shows_its_flag(tmp_path, capsys):
    """Notes of the trainer name settings as the flags the user types, never as raw marks."""
    from scaletrain.foundation.errors import arg

    Reporter(True, tmp_path).say(f"scaletrain: note: the last 1 micro-step(s) did not complete an optimizer step "
                                 f"({arg('grad_accum', 2)})")
    out = capsys.readouterr().out
    assert "(--grad-accum 2)" in out and "\x1f" not in out and "\x1e" not in out, repr(out)
