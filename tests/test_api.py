"""The public library API, in one process and at world size 2 under torchrun."""

import re
import sys

import pytest
import torch

import scaletrain
from scaletrain.foundation.errors import UsageError

from .helpers import REPO, run, test_env, torchrun
from .workers.reference import one_process_reference

WORKERS = REPO / "tests" / "workers"


@pytest.mark.timeout(120)
def test_ddp_at_world_size_2_matches_one_process(tmp_path):
    out = tmp_path / "ddp.pt"
    result = torchrun(WORKERS / "ddp_equivalence.py", str(out), nproc=2, timeout=100)
    assert result.returncode == 0, result.stderr
    saved = torch.load(out, weights_only=True)
    reference = one_process_reference()
    for name, value in reference.items():
        torch.testing.assert_close(saved["params"][name], value, atol=1e-5, rtol=0)
    facts = saved["facts"]
    assert facts["world_size"] == 2 and facts["launcher"] == "torchrun"
    assert facts["mean_of_rank"] == 0.5 and facts["sum_of_one"] == 2.0
    assert facts["evaluation"]["count"] == 7  # 7 samples on 2 ranks: the padding is not counted
    first, second = facts["epochs"]
    assert len(first) == 5 and first != second  # rank 0's half of 10 items, reshuffled per epoch


def test_evaluate_in_one_process_counts_every_sample():
    from torch import nn
    from torch.utils.data import TensorDataset

    with scaletrain.init(strategy="single") as r:
        model = r.setup(nn.Linear(4, 3))
        data = TensorDataset(torch.randn(11, 4), torch.randint(0, 3, (11,)))
        result = r.evaluate(model, data, batch_size=4)
        logits = model(data.tensors[0])
        expected = (logits.argmax(1) == data.tensors[1]).float().mean().item()
        assert result["count"] == 11 and result["accuracy"] == pytest.approx(expected)
        assert result["loss"] == pytest.approx(nn.functional.cross_entropy(logits, data.tensors[1]).item(), rel=1e-5)


def test_init_without_launcher_is_one_process():
    with scaletrain.init(environ={}) as r:
        assert (r.rank, r.world_size, r.is_main, r.device.type, r.backend) == (0, 1, True, "cpu", "gloo")
        assert r.mean(3.0) == 3.0 and r.threads >= 1


def test_an_error_in_the_block_is_not_replaced_by_one_while_closing(monkeypatch):
    """Out of memory inside `with scaletrain.init()`: closing may fail too (no memory for a
    thread); the error that ended the block is the one raised. A failing close alone raises."""
    run = scaletrain.init(environ={})
    closed = []

    def close():
        closed.append(True)
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(run, "close", close)
    with pytest.raises(MemoryError):
        with run:
            raise MemoryError("out of memory")
    with pytest.raises(RuntimeError, match="new thread"):
        with run:
            pass
    assert closed == [True, True]
    monkeypatch.undo()
    run.close()


def test_no_sync_then_sync_accumulates():
    from torch import nn

    with scaletrain.init(strategy="ddp", environ={}) as r:
        torch.manual_seed(0)
        model = r.setup(nn.Linear(4, 1))
        x = torch.randn(4, 4)
        with r.no_sync(model):
            model(x[:2]).sum().backward()
        model(x[2:]).sum().backward()
        expected = x.sum(0, keepdim=True)
        torch.testing.assert_close(r.unwrap(model).weight.grad, expected)


@pytest.mark.parametrize("kwargs, message", [
    ({"strategy": "nope"}, "unknown strategy='nope'"),
    ({"backend": "nccl"}, "backend 'nccl' is not usable here"),
    ({"device": "cuda"}, "no CUDA device"),
    ({"threads": 0}, "at least 1 thread"),
])
def test_bad_init_arguments_are_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message):
        scaletrain.init(environ={}, **kwargs)


def test_single_strategy_refuses_two_processes():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with pytest.raises(UsageError, match="strategy 'single' runs one process"):
        scaletrain.init(strategy="single", environ=env)


@pytest.mark.timeout(200)
def test_user_script_runs_unchanged_as_one_process_and_under_torchrun():
    script = REPO / "examples" / "train_digits.py"
    alone = run([sys.executable, str(script)], timeout=90, env=test_env())
    assert alone.returncode == 0, alone.stderr
    two = torchrun(script, nproc=2, timeout=100)
    assert two.returncode == 0, two.stderr
    for result, world in ((alone, 1), (two, 2)):
        last = result.stdout.strip().splitlines()[-1]
        accuracy = float(re.search(r"held-out accuracy ([0-9.]+)", last).group(1))
        assert f"world size {world}" in last and "(360 samples" in last and accuracy >= 0.93, last
        assert len(result.stdout.strip().splitlines()) == 10  # rank 0 prints; rank 1 does not


@pytest.mark.timeout(120)
def test_models_not_set_up_once_are_refused_in_one_line_at_world_size_2():
    """A second run.setup of a model; training a model never given to run.setup (evaluating it is fine)."""
    result = run([sys.executable, "-m", "scaletrain", "launch", "--nproc-per-node", "2",
                  str(WORKERS / "unprepared_models.py")], timeout=100)
    assert result.returncode == 2, result.stderr
    assert result.stdout.count("REFUSED setup twice: run.setup was already called on this model") == 2, result.stdout
    assert "EVALUATED 8" in result.stdout and "TRAINED" not in result.stdout
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and "never given to run.setup" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_float8_is_refused_in_one_line_where_it_cannot_run():
    """On a CPU (here); on a GPU without float8 hardware; without torchao (checked as a GPU
    with float8 would be, naming the pip line)."""
    import builtins

    from scaletrain.foundation.errors import UsageError
    from scaletrain.parallel.float8 import float8_problem

    with pytest.raises(UsageError, match=r"precision='float8'.*but this run is on the cpu: use precision='bf16'"):
        scaletrain.init(strategy="single", precision="float8")
    old = float8_problem("cuda", (8, 0), "NVIDIA A100-SXM4-80GB")
    assert "NVIDIA A100-SXM4-80GB (compute capability 8.0)" in old and "\n" not in old
    real_import = builtins.__import__

    def no_torchao(name, *args, **kwargs):
        if name.startswith("torchao"):
            raise ImportError("No module named 'torchao'")
        return real_import(name, *args, **kwargs)
    builtins.__import__ = no_torchao
    try:
        missing = float8_problem("cuda", (9, 0), "NVIDIA H100 80GB HBM3")
    finally:
        builtins.__import__ = real_import
    assert "pip install torchao" in missing and "\n" not in missing
