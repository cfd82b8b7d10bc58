"""Asynchronous checkpoints (`--checkpoint-async`, `run.checkpointer(asynchronous=True)`): a
rank killed (SIGKILL) while a save is being written leaves the previous complete checkpoint,
and the run resumed from it ends exactly as one never interrupted; a run that ends while a
save is still being written leaves that checkpoint complete and the newest."""

from __future__ import annotations

import pytest
import torch

import scaletrain
from scaletrain.checkpoint import latest_checkpoint
from tests.helpers import REPO, torchrun
from tests.workers.async_checkpoint_worker import model

WORKER = REPO / "tests" / "workers" / "async_checkpoint_worker.py"


def final_state(folder):
    with scaletrain.init(strategy="single", seed=0) as run:
        net = model()
        optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
        net, optimizer = run.setup(net, optimizer)
        resumed = run.load_checkpoint(folder, net, optimizer)
        return resumed["step"], {k: v.clone() for k, v in net.state_dict().items()}, optimizer.state_dict()


@pytest.mark.timeout(240)
def test_kill_while_writing_resumes_from_the_previous_and_ends_equal(tmp_path):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    out = torchrun(WORKER, "whole", str(whole), timeout=120, check=True).stdout
    # The run ended while step 6 was still being written; leaving finished it.
    assert "IN_FLIGHT_AT_EXIT True" in out, out
    assert latest_checkpoint(whole / "ckpt").name == "step-00000006"
    assert not [p for p in (whole / "ckpt").iterdir() if p.name.startswith(".step-")]

    died = torchrun(WORKER, "die", str(broken), timeout=120)
    assert died.returncode != 0 and "saving step 4" in died.stdout, died
    assert latest_checkpoint(broken / "ckpt").name == "step-00000002"  # step 4 never became a checkpoint
    assert not (broken / "ckpt" / "step-00000004").exists()

    out = torchrun(WORKER, "resume", str(broken), timeout=120, check=True).stdout
    assert "RESUMED_AT 2" in out, out
    step_a, model_a, optim_a = final_state(whole / "ckpt")
    step_b, model_b, optim_b = final_state(broken / "ckpt")
    assert step_a == step_b == 6
    for key in model_a:
        assert torch.equal(model_a[key], model_b[key]), key
    for param, state in optim_a["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(optim_b["state"][param][name])), (param, name)
