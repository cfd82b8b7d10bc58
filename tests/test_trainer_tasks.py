"""The trainer on users' own models and data of other kinds than classification: a model
that computes its own loss from dict samples (told from the data: task "own"), and a
regression told from float targets; a task that does not fit the data is one line."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import scaletrain, test_env

USER_CODE = textwrap.dedent('''
    import torch
    from torch import nn

    class OwnLoss(nn.Module):
        """Called with keyword arguments; returns its own loss, as transformers models do."""
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 1)
        def forward(self, features, target):
            prediction = self.linear(features).squeeze(-1)
            return {"loss": ((prediction - target) ** 2).mean(), "prediction": prediction}

    class Rows(torch.utils.data.Dataset):
        def __init__(self, n=256):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(n, 4, generator=g)
            self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
        def __len__(self):
            return len(self.y)
        def __getitem__(self, i):
            return {"features": self.x[i], "target": self.y[i]}

    class Pairs(Rows):
        def __getitem__(self, i):
            return self.x[i], self.y[i]

    def own_loss_model():
        return OwnLoss()

    def dict_rows():
        return Rows()

    def linear():
        return nn.Linear(4, 1)

    def float_pairs():
        return Pairs()
''')


@pytest.fixture
def user_code(tmp_path):
    (tmp_path / "usercode.py").write_text(USER_CODE)
    return tmp_path


@pytest.mark.parametrize("model,dataset,task", [("own_loss_model", "dict_rows", "own"),
                                                ("linear", "float_pairs", "regression")])
def test_the_trainer_takes_other_tasks(user_code, model, dataset, task):
    out = user_code / "run"
    done = scaletrain("train", "--strategy", "single", "--model", f"usercode:{model}", "--dataset",
                      f"usercode:{dataset}", "--epochs", "8", "--lr", "0.1", "--out", str(out),
                      cwd=user_code, env=test_env(), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    epochs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if '"epoch"' in l]
    assert summary["task"] == task and "final_accuracy" not in summary
    assert summary["final_loss"] < epochs[0]["eval_loss"] / 2, (summary["final_loss"], epochs[0])


def test_a_task_that_does_not_fit_is_one_line(user_code):
    done = scaletrain("train", "--strategy", "single", "--model", "usercode:own_loss_model", "--dataset",
                      "usercode:dict_rows", "--task", "classification", "--epochs", "1", "--out",
                      str(user_code / "run"), cwd=user_code, env=test_env(), timeout=180)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "--task classification needs the model to return a tensor of logits" in done.stderr
    assert "use --task own" in done.stderr


@pytest.mark.parametrize("task,target,words", [
    ("regression", 3, "--task regression needs float targets (the values to predict), but the dataset's targets are "
                      "one class id per sample (integers); give --task classification"),
    ("classification", list(range(64)), "--task classification needs one integer class id per sample, but the "
                                        "dataset's targets are 64 integers per sample (shape (64,)); give --task lm"),
    ("lm", 3, "--task lm needs a sequence of integer token ids per sample (the next tokens), but the dataset's "
              "targets are one class id per sample (integers); give --task classification"),
    ("classification", 0.5, "give --task regression"),
])
def test_a_task_the_targets_cannot_be_is_refused_before_the_first_step(task, target, words):
    """The targets' dtype and shape are known from one sample: --task regression on the
    digits, --task classification on stdlib-gpt ended in a shape traceback on every rank, and
    --task lm on a classifier trained and reported a perplexity."""
    import torch

    from scaletrain.foundation.errors import UsageError
    from scaletrain.workloads.tasks import check_targets, get_task

    with pytest.raises(UsageError) as refused:
        check_targets(get_task(task), (torch.zeros(4), torch.tensor(target)))
    assert words in refused.value.raw and refused.value.same_on_every_rank


def test_a_task_the_targets_cannot_be_stops_every_rank_in_one_line(tmp_path):
    out = tmp_path / "run"
    done = scaletrain("train", "--task", "regression", "--nproc-per-node", "2", "--max-steps", "2", "--out", str(out),
                      timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith("scaletrain: error: --task regression needs float targets"), \
        done.stderr
    assert not out.exists()
