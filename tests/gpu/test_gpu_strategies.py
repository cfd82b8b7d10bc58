"""Every strategy on the device — single; dp, mp and hybrid over the devices one process
drives; ddp and fsdp at world size 1 and 2; ddp with Gloo on CUDA tensors, two processes
sharing one GPU; pipeline; tensor parallel and the compositions of the mesh — each equal to
one plain process on the same device and the same global batches after 3 optimizer steps
(fp32: within 1e-5; bf16 and fp16, the latter with its gradient scaler: finite and within
0.05 of fp32's loss), also under torch.compile. Configurations with the same world size run
in one torchrun launch (tests/gpu/workers/equivalence.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import torchrun

from .cases import Case, cases
from .target import TARGET, Target

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not TARGET.available, reason=TARGET.skip_reason)]

WORKER = Path(__file__).resolve().parent / "workers" / "equivalence.py"
ATOL = 1e-5          # fp32: round-off only
MIXED_LOSS = 0.05    # bf16/fp16: how far the loss may move from fp32's (as on the CPU)
LAUNCH_TIMEOUT = 900  # a launch with torch.compile cases compiles several times
#: Without a device the checks are still listed (and skipped): as a machine with 8 GPUs would run them.
CASES = cases(TARGET if TARGET.available else Target("cuda", "nccl", 8))


@pytest.fixture(scope="module")
def launches() -> dict:
    return {}


def launch(case: Case, target: Target, folder: Path, selected: set) -> dict:
    """Runs every configuration launched with `case` that this machine can run and this session
    selected (`-k cp`: context parallel's alone); {name: result}."""
    group = [c for c in CASES if c.launch() == case.launch() and not target.lacks(c.devices_needed)
             and c.name in selected]
    spec = folder / f"cases-{case.world}{'-shared' if case.shared_device else ''}.json"
    spec.write_text(json.dumps([c.as_dict() for c in group]))
    backend = "gloo" if case.shared_device else target.backend
    # --standalone: torchrun binds its own port; a free port found beforehand can be taken by
    # another socket before torchrun binds it, and such a launch fails before any rank starts.
    done = torchrun(WORKER, "--device", target.device, "--backend", backend, str(spec), nproc=case.world,
                    timeout=LAUNCH_TIMEOUT, standalone=True)
    found, started = {}, None
    for line in done.stdout.splitlines():
        kind, _, payload = line.partition(" ")
        if kind == "START":
            started = payload
        elif kind == "CASE":
            result = json.loads(payload)
            found[result["name"]] = result
    if done.returncode != 0:
        # The child's own exception, not torchrun's ChildFailedError that wraps it.
        errors = [line for line in done.stderr.splitlines()
                  if ("Error" in line or "error:" in line) and "ChildFailedError" not in line]
        why = (errors or done.stderr.strip().splitlines() or ["no output"])[-1].strip()
        for c in group:
            if c.name not in found:
                found[c.name] = {"error": f"exit {done.returncode} in this configuration: {why}" if c.name == started
                                 else f"not reached: the launch ended in {started}" if started is not None
                                 else f"the launch failed before its first configuration (exit {done.returncode}): "
                                      f"{why}"}
    return found


def parameter_count(model: str) -> int:
    if model == "gpt":
        from tests.gpu.workers.gpt_reference import gpt_model

        return len(list(gpt_model().parameters()))
    from tests.workers.strategy_reference import tiny_model

    return len(list(tiny_model().parameters()))


def describe(case: Case, r: dict) -> str:
    where = f"on {', '.join(r['devices'])} ({r['backend']}, {r['mesh']})"
    if case.precision == "fp32":
        held = f", held-out loss Δ {r['eval_loss_diff']:.1e}" if "eval_loss_diff" in r else ""
        text = f"matches one process: |Δparam| {r['param_diff']:.1e}, |Δloss| {r['loss_diff']:.1e}{held} {where}"
    else:
        text = (f"{case.precision}: loss {r['loss']:.4f} against fp32's {r['reference_loss']:.4f} "
                f"(Δ {r['loss_diff']:.1e}), |Δparam| {r['param_diff']:.1e} {where}")
    if "loss_scale" in r:
        text += f", loss scale {r['loss_scale']:g}"
    if case.options.get("compile"):
        text += f", {r['graphs']} graph(s) compiled"
    return text + (f"; {case.note}" if case.note else "")


@pytest.mark.timeout(LAUNCH_TIMEOUT + 60)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_one_process(case, target, launches, check, tmp_path_factory, request):
    if why := target.lacks(case.devices_needed, case.cannot_show):
        pytest.skip(why)
    if case.launch() not in launches:
        selected = {item.callspec.params["case"].name for item in request.session.items
                    if item.originalname == "test_matches_one_process"}
        launches[case.launch()] = launch(case, target, tmp_path_factory.mktemp("cases"), selected)
    r = launches[case.launch()][case.name]
    assert "error" not in r, r["error"]
    check(describe(case, r), **r)
    assert r["finite"], r
    assert all(d.startswith(target.device) for d in r["devices"]), f"parameters on {r['devices']}, not {target.device}"
    if case.shared_device:
        assert r["devices"] == [f"{target.device}:0" if target.device == "cuda" else "cpu"], r["devices"]
        assert r["backend"] == "gloo", r
    assert r["covered"] == parameter_count(case.model), r  # every parameter is held by some process
    if case.precision == "fp32":
        for key in ("param_diff", "loss_diff", "eval_loss_diff", "eval_acc_diff"):
            if key in r:
                assert r[key] < ATOL, f"{key} = {r[key]:.3g}, more than {ATOL:g} from one process"
        if "eval_count" in r:
            assert r["eval_count"] == 13, r  # every held-out sample counted exactly once
    else:  # the rounding shows in the loss, but it stays close to fp32's
        assert 0 < r["loss_diff"] < MIXED_LOSS, f"{case.precision} loss {r['loss']} against fp32's {r['reference_loss']}"
    if case.precision == "fp16":
        assert r.get("loss_scale", 0) > 0, "fp16 ran without a gradient scaler"
    if case.options.get("compile"):
        assert r["graphs"] > 0, "torch.compile made no graph"
